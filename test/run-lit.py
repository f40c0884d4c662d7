#!/usr/bin/env python3
"""Runs lit over the moe-compiler suites and ends with one summary line.

usage: run-lit.py LIT BUILD_TEST_DIR [lit options...]

The summary line, "check-moe: N passed, N failed, N skipped", is what CI
reads; the exit status is lit's.
"""
import json
import os
import subprocess
import sys
import tempfile

PASSED = {"PASS", "XFAIL", "FLAKYPASS"}
SKIPPED = {"UNSUPPORTED", "SKIPPED", "EXCLUDED"}


def main():
    lit, test_dir, *options = sys.argv[1:]
    suites = [test_dir, os.path.join(test_dir, "unittests")]
    with tempfile.TemporaryDirectory() as tmp:
        results_path = os.path.join(tmp, "results.json")
        status = subprocess.call([lit, *options, "-o", results_path, *suites])
        try:
            with open(results_path) as f:
                tests = json.load(f)["tests"]
        except (OSError, ValueError, KeyError) as err:
            print(f"check-moe: could not read lit results: {err}")
            return status or 1
    passed = sum(t["code"] in PASSED for t in tests)
    skipped = sum(t["code"] in SKIPPED for t in tests)
    failed = len(tests) - passed - skipped
    print(f"check-moe: {passed} passed, {failed} failed, {skipped} skipped")
    if status == 0 and (failed or passed == 0):
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
