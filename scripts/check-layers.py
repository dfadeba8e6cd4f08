#!/usr/bin/env python3
"""Checks the project's #include graph against the layer table.

    scripts/check-layers.py [--root DIR] [--write-baseline]

The table is the one under "## Layers" in docs/architecture.md (the design's
table, with its folders): each row names a layer, a folder and what it may
use ("0-2" = every folder of layers 0 to 2; named folders: common, store,
runtime; "0 only" = layer 0). A file belongs to the folder of the longest
row that prefixes its path; a quoted #include of a project file is an edge
from its folder to the included file's folder. An edge is allowed inside a
folder, to a folder the row allows, and never into device_agent/ (the agent
is a process, not a library) or from anywhere but tests/ into tests/.

Edges the code has today and the table forbids are listed, one per line
("from/file -> included/file"), in scripts/layers-baseline.txt: the debt the
architecture issue pays off. The check fails on an edge that is neither
allowed nor in the baseline, and on a baseline line that no longer occurs
(delete it: the debt only shrinks). Exit 0 when clean, 1 otherwise, 2 when the
table cannot be read.
"""
import os
import re
import sys

SOURCE_DIRS = ["common", "proto", "compiler", "cost_model", "device_agent", "store", "search", "server", "worker",
               "deploy", "cli", "bench"]
NAMED = {"common": "common", "store": "store", "runtime": "device_agent/runtime"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(root):
    path = os.path.join(root, "docs", "architecture.md")
    rows = []
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise SystemExit(f"check-layers: cannot read {path}: {e}")
    section = text.split("\n## Layers", 1)
    if len(section) < 2:
        raise SystemExit(f"check-layers: {path} has no '## Layers' section")
    for line in section[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"\d+|—|-", cells[0]):
            continue
        layer = int(cells[0]) if cells[0].isdigit() else None
        folder = cells[1].strip("`").rstrip("/")
        rows.append((layer, folder, cells[3]))
    if not rows:
        raise SystemExit(f"check-layers: no rows in the Layers table of {path}")
    return rows


def allowed_folders(rows, may_use):
    """The folders a row's 'may use' cell names."""
    out = set()
    text = may_use.replace("only", "")
    for token in re.split(r"[,;]\s*", text):
        token = token.strip().strip("`")
        if not token or token in ("—", "-", "everything"):
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", token)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            out |= {f for (layer, f, _) in rows if layer is not None and lo <= layer <= hi}
        elif token in NAMED:
            out.add(NAMED[token])
        else:
            raise SystemExit(f"check-layers: unknown name '{token}' in 'may use' cell '{may_use}'")
    return out


def folder_of(path, folders):
    best = None
    for f in folders:
        if path == f or path.startswith(f + "/"):
            if best is None or len(f) > len(best):
                best = f
    return best


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    write = "--write-baseline" in argv
    if "--root" in argv:
        root = argv[argv.index("--root") + 1]
    rows = read_table(root)
    folders = [f for (_, f, _) in rows]
    may = {f: allowed_folders(rows, m) for (_, f, m) in rows}
    edges, unmapped = set(), set()
    missing = [f for f in folders if not os.path.isdir(os.path.join(root, f))]
    if missing:
        print("check-layers: rows whose folders are not split out yet (their files sit in the "
              "folder above): " + ", ".join(missing))
    for top in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith((".cc", ".h", ".cpp")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                src = folder_of(rel, folders)
                if src is None:
                    continue
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                    for line in f:
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if inc.startswith("tunefarm/"):  # generated from proto/
                            inc = "proto/" + inc
                        if inc.startswith("tests/"):
                            edges.add(f"{rel} -> {inc}")
                            continue
                        dst = folder_of(inc, folders)
                        if dst is None:
                            # A file of ours that no row covers is a gap in the table.
                            if os.path.exists(os.path.join(root, inc)):
                                unmapped.add(f"{rel} -> {inc}")
                            continue
                        if dst == src:
                            continue
                        ok = dst in may[src] and dst != "device_agent"
                        if not ok:
                            edges.add(f"{rel} -> {inc}")
    baseline_path = os.path.join(root, "scripts", "layers-baseline.txt")
    if write:
        with open(baseline_path, "w", encoding="utf-8") as f:
            f.write("# Includes the layer table forbids that the code still has (see\n"
                    "# scripts/check-layers.py). Only ever delete lines.\n")
            for e in sorted(edges):
                f.write(e + "\n")
        print(f"check-layers: wrote {len(edges)} edges to {baseline_path}")
        return 0
    baseline = set()
    if os.path.exists(baseline_path):
        for line in open(baseline_path, encoding="utf-8"):
            line = line.strip()
            if line and not line.startswith("#"):
                baseline.add(line)
    new = sorted(edges - baseline)
    gone = sorted(baseline - edges)
    for e in new:
        src, inc = e.split(" -> ")
        s = folder_of(src, folders)
        d = "tests" if inc.startswith("tests/") else folder_of(
            "proto/" + inc if inc.startswith("tunefarm/") else inc, folders)
        print(f"check-layers: forbidden include: {e} ({s}/ may not use {d}/)")
    for e in gone:
        print(f"check-layers: fixed, delete from scripts/layers-baseline.txt: {e}")
    for e in sorted(unmapped):
        print(f"check-layers: included file in no row of the table: {e}")
    print(f"check-layers: {len(edges)} forbidden edges, all in the baseline"
          if not new and not gone else
          f"check-layers: {len(new)} new forbidden edge(s), {len(gone)} stale baseline line(s)")
    return 1 if new or gone or unmapped else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
