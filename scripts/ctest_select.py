"""Selects the tests of a build that did not already pass in another build's CTest run.

    python3 scripts/ctest_select.py BUILD_DIR OUT_FILE JUNIT_REPORT...

Reads the JUnit reports (`ctest --output-junit`) of one build, lists BUILD_DIR's tests
(`ctest -N`), and writes to OUT_FILE a `ctest -I` file that names, by number, every test of
BUILD_DIR that no report shows as passed: failed, skipped or absent there. Prints how many
of each; exits 3, writing nothing, when every test passed already. scripts/test.sh uses it
so that a unit or world test that passed under ASan and UBSan is not run a second time in
the release build, while everything else is.
"""

import re
import subprocess
import sys
import xml.etree.ElementTree as ET


def passed_names(reports):
    names = set()
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            if case.get("status") == "run" and case.find("failure") is None and case.find("error") is None:
                names.add(case.get("name"))
    return names


def build_tests(build_dir):
    listing = subprocess.run(["ctest", "-N"], cwd=build_dir, check=True, capture_output=True, text=True).stdout
    tests = []
    for line in listing.splitlines():
        m = re.match(r"\s*Test\s+#(\d+): (.*)$", line)
        if m:
            tests.append((int(m.group(1)), m.group(2)))
    return tests


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    build_dir, out_file, reports = sys.argv[1], sys.argv[2], sys.argv[3:]
    done = passed_names(reports)
    tests = build_tests(build_dir)
    if not tests:
        sys.exit(f"ctest -N in {build_dir} lists no tests")
    keep = [n for n, name in tests if name not in done]
    if not keep:
        print(f"all {len(tests)} tests passed already")
        sys.exit(3)  # a -I file of no numbers would select every test
    # Start, end and stride of 0 select no range; the numbers after them are the tests.
    with open(out_file, "w") as f:
        f.write(",".join(["0", "0", "0"] + [str(n) for n in keep]) + "\n")
    print(f"{len(tests) - len(keep)} of {len(tests)} tests passed already in {len(done)} reported; "
          f"{len(keep)} to run")


if __name__ == "__main__":
    main()
