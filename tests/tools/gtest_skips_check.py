#!/usr/bin/env python3
"""Skipped GoogleTest cases are reported: every GoogleTest ctest writes its XML report to
<build>/gtest-results/<ctest name>.xml (tests/CMakeLists.txt), and scripts/gtest_skips.py
lists the skipped cases of such reports with their reasons (scripts/test.sh prints it).

    gtest_skips_check.py SOURCE_DIR BUILD_DIR CTEST
"""
import json
import os
import subprocess
import sys
import tempfile

REPORT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="2" failures="0" disabled="0" errors="0" name="AllTests">
  <testsuite name="Extend" tests="2" failures="0" disabled="0" skipped="1" errors="0">
    <testcase name="Plain" status="run" result="completed" time="0.1" classname="Extend" />
    <testcase name="WarpgroupMma" status="run" result="skipped" time="0" classname="Extend">
      <skipped message="/src/tests/extend/test_extend.cpp:176&#x0A;nv_wgmma: needs inline PTX&#x0A;Google Test trace:&#x0A;x.cpp:1: seed"/>
    </testcase>
  </testsuite>
</testsuites>
"""


def main(argv):
    src, build, ctest = argv[1:4]
    failures = []
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "test_extend.cpp_cpu.xml"), "w") as f:
            f.write(REPORT)
        out = subprocess.run([sys.executable, os.path.join(src, "scripts", "gtest_skips.py"), d],
                             capture_output=True, text=True).stdout
        want = "skipped  test_extend.cpp_cpu  Extend.WarpgroupMma: nv_wgmma: needs inline PTX"
        if want not in out or "Extend.Plain" in out or "1 skipped test case" not in out:
            failures.append(f"gtest_skips.py output lacks '{want}' (or lists a case that ran):\n{out}")
    listing = json.loads(subprocess.run([ctest, "--show-only=json-v1"], cwd=build, capture_output=True,
                                        text=True, check=True).stdout)
    gtests = 0
    for t in listing["tests"]:
        cmd = t.get("command") or []
        if "--gtest_color=no" not in cmd:
            continue
        gtests += 1
        want = "--gtest_output=xml:" + os.path.join(build, "gtest-results", t["name"] + ".xml")
        if want not in cmd:
            failures.append(f"ctest {t['name']} writes no XML report ({want} not in {cmd})")
    if gtests == 0:
        failures.append("no GoogleTest ctest found")
    for f in failures:
        print("FAIL " + f)
    print(f"{gtests} GoogleTest ctests checked, {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
