"""Runs every test of this folder and prints one TAP line per test on stdout
("ok N - Class.test", "not ok N - Class.test" with the failure as # comments), for
test/t/052_python_middleware.pl.  Exit status 0 when all passed."""
import os
import sys
import traceback
import unittest


class TapResult(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.count = 0

    def report(self, test, ok, detail=""):
        self.count += 1
        name = f"{type(test).__name__}.{test._testMethodName}"
        print(f"{'ok' if ok else 'not ok'} {self.count} - {name}", flush=True)
        for line in detail.splitlines():
            print(f"# {line}", flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self.report(test, True)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.report(test, False, "".join(traceback.format_exception(*err)))

    def addError(self, test, err):
        super().addError(test, err)
        self.report(test, False, "".join(traceback.format_exception(*err)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.report(test, True, f"skipped: {reason}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [here, os.path.dirname(here)]
    suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py", top_level_dir=here)
    result = TapResult()
    suite.run(result)
    print(f"1..{result.count}", flush=True)
    return 0 if result.wasSuccessful() and result.count > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
