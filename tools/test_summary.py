#!/usr/bin/env python3
"""One line saying what the last `meson test` skipped and why, from its
testlog.json: each suite's "skipped: N of M tests: REASON" lines (the Criterion
suites print them, tests/criterion_main.c; the script suites print "skipped:
REASON" when they skip whole), and every suite meson reported as SKIP.

Usage: test_summary.py BUILD_DIR
"""
import json
import os
import sys


def main(build):
    log = os.path.join(build, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        print(f"skipped: (no {log}: no test ran)")
        return
    parts = []
    with open(log) as f:
        for line in f:
            test = json.loads(line)
            reasons = [
                text.split("skipped:", 1)[1].strip()
                for text in (test.get("stdout") or "").splitlines() + (test.get("stderr") or "").splitlines()
                if text.startswith("skipped:")
            ]
            if reasons:
                parts.append(f"{test['name']}: " + "; ".join(reasons))
            elif test.get("result") == "SKIP":
                parts.append(f"{test['name']}: the whole suite (it printed no reason)")
    print("skipped: " + (" | ".join(parts) if parts else "nothing"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build")
