#!/usr/bin/env python3
"""The test suite's summary: counts, every skip with its cause, the ten
slowest entries, and a verdict.

    scripts/test-report.py BUILD/ctest-junit.xml [BUILD/skips-allowed.txt]

Reads ctest's JUnit file (ctest --output-junit). Every skip in the suite
starts its message with a cause in brackets (tests/testing/skip.h); a skip is
allowed only when its cause is in $TF_ALLOWED_SKIPS (comma-separated; default
"no-gpu,has-gpu", the one fact a CI machine may lack) or listed, one per
line, in the build's skips-allowed.txt (CMake writes no-cuda-toolkit there
when it found no CUDA toolkit). Exit status: 0 when nothing failed and every
skip is allowed, 1 otherwise, 2 when the file is missing or unreadable.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

CAUSE = re.compile(r"^\[([a-z0-9-]+)\] (.*)$")


def skip_reason(output):
    """The cause and message of gtest's first "Skipped" block in `output`."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped") and i + 1 < len(lines):
            m = CAUSE.match(lines[i + 1].strip())
            if m:
                return m.group(1), m.group(2)
            return "untagged", lines[i + 1].strip()
    return "untagged", "no skip message in the output"


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        root = ET.parse(argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"test-report: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 2
    allowed = {c for c in os.environ.get("TF_ALLOWED_SKIPS", "no-gpu,has-gpu").split(",") if c}
    if len(argv) == 3 and os.path.exists(argv[2]):
        for line in open(argv[2], encoding="utf-8"):
            line = line.split("#", 1)[0].strip()
            if line:
                allowed.add(line)
    passed, failed, skipped, timed = [], [], [], []
    for case in root.iter("testcase"):
        name = case.get("name")
        try:
            timed.append((float(case.get("time") or 0), name))
        except ValueError:
            pass
        out = case.findtext("system-out") or ""
        if case.find("failure") is not None or case.get("status") == "fail":
            failed.append(name)
        elif case.find("skipped") is not None or case.get("status") in ("notrun", "disabled"):
            skipped.append((name,) + skip_reason(out))
        else:
            passed.append(name)
    total = len(passed) + len(failed) + len(skipped)
    bad = [s for s in skipped if s[1] not in allowed]
    print()
    print("== test report")
    for name in failed:
        print(f"  FAILED   {name}")
    for name, cause, why in sorted(skipped):
        mark = "SKIPPED " if cause in allowed else "SKIPPED!"
        print(f"  {mark} {name}: [{cause}] {why}")
    if bad:
        print(f"  {len(bad)} skip(s) for a cause this machine should not have "
              f"(allowed: {', '.join(sorted(allowed)) or 'none'}; TF_ALLOWED_SKIPS)")
    slowest = sorted(timed, reverse=True)[:10]
    if slowest:
        print("  slowest:")
        for seconds, name in slowest:
            print(f"  {seconds:8.1f} s  {name}")
    print(f"tests: {total} run, {len(passed)} passed, {len(failed)} failed, "
          f"{len(skipped)} skipped")
    return 1 if failed or bad or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
