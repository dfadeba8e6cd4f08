#!/usr/bin/env python3
"""Checks the agent-only build graph: configures the tree with
-DTUNEFARM_AGENT_ONLY=ON into a scratch directory (no compiling) and lists
the translation units Ninja would compile. Fails when one of them lies in a
folder the board side must not build (compiler/, cost_model/, deploy/, server/,
worker/, cli/, bench/). Prints the count of translation units by folder."""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

FORBIDDEN = ("compiler/", "cost_model/", "deploy/", "server/", "worker/", "cli/", "bench/")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    with tempfile.TemporaryDirectory(prefix="tf-agent-build-") as build:
        cfg = subprocess.run(
            ["cmake", "-G", "Ninja", "-S", root, "-B", build, "-DTUNEFARM_AGENT_ONLY=ON",
             "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
            capture_output=True, text=True)
        if cfg.returncode != 0:
            sys.stderr.write(cfg.stdout[-4000:] + cfg.stderr[-4000:])
            print("check-agent-build: the agent-only configure failed")
            return 1
        with open(os.path.join(build, "compile_commands.json")) as f:
            compdb = json.load(f)
        units = []
        for entry in compdb:
            src = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
            if src.startswith(build):
                units.append("(generated) " + os.path.basename(src))
            else:
                units.append(os.path.relpath(src, root))
    bad = sorted(u for u in units if u.startswith(FORBIDDEN))
    by_folder = collections.Counter(
        u.split(" ")[0] if u.startswith("(") else os.path.dirname(u) for u in units)
    print(f"check-agent-build: {len(units)} translation units: " +
          ", ".join(f"{k} {v}" for k, v in sorted(by_folder.items())))
    for u in bad:
        print(f"check-agent-build: the agent-only build compiles {u}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
