"""run_suite.py's exit codes, and missing_dependency's skip-or-fail rule. Each case writes a
small test module to a temporary directory and runs the runner on it as CTest does."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

import dgpu_testlib

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "run_suite.py")

MODULES = {
    "all_skipped": """
        class T(unittest.TestCase):
            def setUp(self):
                self.skipTest("etcd not found")
            def test_a(self): pass
            def test_b(self): pass
    """,
    "module_skipped": """
        def setUpModule():
            raise unittest.SkipTest("binaries not built")
        class T(unittest.TestCase):
            def test_a(self): pass
    """,
    "some_skipped": """
        class T(unittest.TestCase):
            def test_a(self): pass
            @unittest.skip("promtool not found")
            def test_b(self): pass
    """,
    "passing_subtests": """
        class T(unittest.TestCase):
            def test_a(self):
                for i in range(3):
                    with self.subTest(i=i):
                        self.assertGreaterEqual(i, 0)
    """,
    "failing": """
        class T(unittest.TestCase):
            def test_a(self): self.assertEqual(1, 2)
            def test_b(self): self.skipTest("x")
    """,
    "failing_subtest": """
        class T(unittest.TestCase):
            def test_a(self):
                for i in range(2):
                    with self.subTest(i=i):
                        self.assertEqual(i, 0)
    """,
    "no_tests": "",
    "not_importable": "import a_module_that_does_not_exist\n",
}


class RunSuiteTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="dgpu-run-suite-")
        for name, body in MODULES.items():
            with open(os.path.join(cls.tmp.name, "test_%s.py" % name), "w") as f:
                f.write("import unittest\n" + textwrap.dedent(body))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_module(self, name):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([sys.executable, RUNNER, "test_" + name], cwd=self.tmp.name,
                              capture_output=True, text=True, timeout=60, env=env)
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
        return proc.returncode, last

    def test_every_test_skipped_exits_77(self):
        self.assertEqual(self.run_module("all_skipped"),
                         (77, "run_suite: every test was skipped (2 skipped)"))

    def test_module_skipped_in_setup_exits_77(self):
        self.assertEqual(self.run_module("module_skipped"),
                         (77, "run_suite: every test was skipped (1 skipped)"))

    def test_some_skipped_passes(self):
        self.assertEqual(self.run_module("some_skipped"), (0, "OK (skipped=1)"))

    def test_passing_subtests_pass(self):
        self.assertEqual(self.run_module("passing_subtests"), (0, "OK"))

    def test_a_failure_exits_1(self):
        self.assertEqual(self.run_module("failing"), (1, "FAILED (failures=1, skipped=1)"))
        self.assertEqual(self.run_module("failing_subtest"), (1, "FAILED (failures=1)"))

    def test_no_tests_exits_1(self):
        self.assertEqual(self.run_module("no_tests"), (1, "run_suite: no tests ran"))

    def test_import_error_exits_1(self):
        self.assertEqual(self.run_module("not_importable"), (1, "FAILED (errors=1)"))


class MissingDependencyTest(unittest.TestCase):
    def test_skips_off_ci(self):
        with mock.patch.dict(os.environ, {"CI": ""}):
            with self.assertRaises(unittest.SkipTest) as caught:
                dgpu_testlib.missing_dependency(self, "etcd not found")
        self.assertEqual(str(caught.exception), "etcd not found")

    def test_fails_on_ci(self):
        for value in ("true", "TRUE", "1"):
            with mock.patch.dict(os.environ, {"CI": value}):
                with self.assertRaises(AssertionError) as caught:
                    dgpu_testlib.missing_dependency(self, "etcd not found")
            self.assertEqual(str(caught.exception), "etcd not found (CI=true: every declared "
                                                    "dependency must be installed)")


if __name__ == "__main__":
    unittest.main()
