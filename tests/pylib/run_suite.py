"""Runs one Python test module the way `python3 -m unittest -v MODULE` does, with an exit code
that tells CTest what happened:

    0   every test ran and passed (some may have been skipped);
    1   a test failed or raised, or the module has no tests;
    77  tests were found but every one of them was skipped (a dependency is missing): CTest shows
        the suite as "Not Run" through the SKIP_RETURN_CODE 77 property.

Usage, from the module's directory: python3 run_suite.py MODULE
Python 3 standard library only.
"""

import os
import sys
import unittest

EXIT_ALL_SKIPPED = 77


class CountingResult(unittest.TextTestResult):
    """A TextTestResult that also counts the tests that passed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.passed = 0

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1


def exit_code(result):
    """The process exit code for a finished run (see the module's docstring)."""
    if not result.wasSuccessful():
        return 1
    if result.passed == 0 and not result.skipped:
        print("run_suite: no tests ran", file=sys.stderr)
        return 1
    if result.passed == 0:
        print("run_suite: every test was skipped (%d skipped)" % len(result.skipped),
              file=sys.stderr)
        return EXIT_ALL_SKIPPED
    return 0


def main(argv):
    if len(argv) != 2:
        print("usage: run_suite.py MODULE", file=sys.stderr)
        return 2
    sys.path.insert(0, os.getcwd())
    suite = unittest.defaultTestLoader.loadTestsFromName(argv[1])
    runner = unittest.TextTestRunner(verbosity=2, resultclass=CountingResult)
    return exit_code(runner.run(suite))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
