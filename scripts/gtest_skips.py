#!/usr/bin/env python3
"""Lists the GoogleTest cases that were skipped (GTEST_SKIP) in the XML reports the ctest
suites write (build/gtest-results/<ctest name>.xml, tests/CMakeLists.txt): ctest counts a
test whose cases were skipped as passed, so scripts/test.sh prints this after ctest.

    python3 scripts/gtest_skips.py build/gtest-results
"""
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET


def skips(path):
    """(case, reason) of every skipped test case in one report."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        skipped = case.find("skipped")
        if skipped is None and case.get("result") != "skipped":
            continue
        lines = ((skipped.get("message") if skipped is not None else "") or "").strip().splitlines()
        # GoogleTest's message: "file:line" of the GTEST_SKIP, the reason, then any trace.
        if lines and re.fullmatch(r".*:\d+", lines[0]):
            lines = lines[1:]
        if "Google Test trace:" in lines:
            lines = lines[: lines.index("Google Test trace:")]
        reason = " ".join(l.strip() for l in lines) or "(no reason given)"
        out.append((case.get("classname", "") + "." + case.get("name", ""), reason))
    return out


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    reports = sorted(glob.glob(os.path.join(argv[1], "*.xml")))
    total = 0
    for path in reports:
        try:
            found = skips(path)
        except ET.ParseError as e:  # a test killed while writing its report
            print(f"gtest skips: {os.path.basename(path)}: unreadable report ({e})")
            continue
        for case, reason in found:
            print(f"skipped  {os.path.basename(path)[:-4]}  {case}: {reason}")
        total += len(found)
    print(f"gtest skips: {total} skipped test case(s) in {len(reports)} GoogleTest report(s) ({argv[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
