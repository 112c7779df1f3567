"""Runs a pytest suite with the exit codes of run_suite.py, for CTest:

    0   every test ran and passed (some may have been skipped);
    1   a test failed or errored, no test was collected, or pytest is missing under CI=true;
    77  pytest is missing on a developer machine, or every test was skipped: CTest shows the
        suite as "Not Run" (SKIP_RETURN_CODE 77).

Usage: python3 run_pytest.py PATH [pytest arguments...]
"""

import os
import sys

EXIT_ALL_SKIPPED = 77


class _Counts:
    """A pytest plugin that counts the outcomes of the test calls."""

    def __init__(self):
        self.passed = 0
        self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            self.passed += 1
        elif report.skipped:
            self.skipped += 1


def main(argv):
    if len(argv) < 2:
        print("usage: run_pytest.py PATH [pytest arguments...]", file=sys.stderr)
        return 2
    try:
        import pytest
    except ImportError:
        ci = os.environ.get("CI", "").lower() in ("true", "1", "yes")
        print("run_pytest: pytest is not installed (Debian: python3-pytest)%s"
              % (" (CI=true: every declared dependency must be installed)" if ci else ""),
              file=sys.stderr)
        return 1 if ci else EXIT_ALL_SKIPPED
    counts = _Counts()
    code = pytest.main(["-v", "-p", "no:cacheprovider", "-rs"] + argv[1:], plugins=[counts])
    if code != 0:
        return 1
    if counts.passed == 0:
        print("run_pytest: every test was skipped (%d skipped)" % counts.skipped,
              file=sys.stderr)
        return EXIT_ALL_SKIPPED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
