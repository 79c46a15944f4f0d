#!/usr/bin/env python3
"""Runs rdma-core's own test suite (tests/ of the release Debian ships in python3-pyverbs,
unpacked at /opt/rdma-core/tests by qemu-scripts/pyverbs-layer.sh) module by module, each
module in a process of its own, and prints one line per test for the VM tests to read.

    run_suite.py --dev DEV --gid N [--tests DIR] [--module-timeout S] [--test-timeout S]
                 [MODULE...]

DEV and N are what rdma-core's run_tests.py takes as --dev and --gid. With no MODULE,
every test module of the suite runs (test_*.py, in name order).

The suite is imported once (its package imports every module), then each module's tests
run in a child forked for it: a module that crashes its process (a segmentation fault:
as one process on Soft-RoCE the suite stops in test_mlx5_cq) or hangs ends alone, and
the next module starts from the same clean parent. rdma-core's run_tests.py passes its
arguments through the same parser (args_parser), so the tests see the same settings.

Output, one line each (the test's id is unittest's: tests.test_qp.QPTest.test_create_rc_qp):

    @@@ RDMA-CORE TEST <id> <pass|fail|error|skip|xfail|xpass> [first line of the reason]
        <the traceback of a failure or error, each line indented by four spaces>
    @@@ RDMA-CORE MODULE <module> <ok|crashed|timeout> seconds <S> [the test it stopped in]

A test that was running when its module's process died or was stopped is reported as
`error` with the reason `crashed: ...` or `timeout`.
"""

import argparse
import gc
import os
import signal
import sys
import time
import traceback
import unittest


def say(line):
    """Prints one line at once (the parent and its children share the console)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def first_line(text):
    """The first non-empty line of text, or an empty string."""
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


class LineResult(unittest.TestResult):
    """A unittest result that prints each test's outcome as it comes, and before each
    test its id to a file the parent reads if the process dies.

    It keeps no test once it has ended: unittest's own result holds every skipped, failed
    or erring test case in its lists, and with it what the case opened (a test that
    skips after its setUp has opened a device keeps that context open). On a device
    with few user contexts (rnic.ko: 12 per function, one doorbell page each) a module
    of skipping tests would otherwise use them up and the next test could not open the
    device (ENOSPC). Each test's objects are collected after it, cycles too."""

    def __init__(self, marker, test_timeout):
        super().__init__()
        self.marker = marker
        self.test_timeout = test_timeout

    def startTest(self, test):
        super().startTest(test)
        with open(self.marker, "w") as f:
            f.write(test.id())
        if self.test_timeout:
            signal.alarm(self.test_timeout)

    def stopTest(self, test):
        signal.alarm(0)
        super().stopTest(test)
        for kept in (self.skipped, self.errors, self.failures, self.expectedFailures,
                     self.unexpectedSuccesses):
            kept.clear()
        gc.collect()
        with open(self.marker, "w"):
            pass

    def report(self, test, outcome, reason="", details=""):
        say(f"@@@ RDMA-CORE TEST {test.id()} {outcome} {first_line(reason)}".rstrip())
        for line in details.splitlines():
            say("    " + line)

    def addSuccess(self, test):
        super().addSuccess(test)
        self.report(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.report(test, "fail", err[1], "".join(traceback.format_exception(*err)))

    def addError(self, test, err):
        super().addError(test, err)
        # A class's setUpClass failing is reported on a stand-in "test".
        self.report(test, "error", f"{err[0].__name__}: {err[1]}",
                    "".join(traceback.format_exception(*err)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.report(test, "skip", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.report(test, "xfail", err[1])

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.report(test, "xpass")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            outcome = "fail" if issubclass(err[0], test.failureException) else "error"
            self.report(subtest, outcome, err[1], "".join(traceback.format_exception(*err)))


class TestTimeout(Exception):
    """A test ran longer than --test-timeout."""


def on_alarm(_signum, _frame):
    raise TestTimeout("the test ran longer than its time limit")


def run_module(module, marker, test_timeout):
    """The child: runs one module's tests, reporting each; never returns."""
    status = 0
    try:
        signal.signal(signal.SIGALRM, on_alarm)
        suite = unittest.defaultTestLoader.loadTestsFromModule(module)
        result = LineResult(marker, test_timeout)
        suite.run(result)
    except BaseException:  # the child must end here, whatever happened
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dev", required=True, help="the RDMA device (run_tests.py's --dev)")
    ap.add_argument("--gid", type=int, required=True, help="its GID index (--gid)")
    ap.add_argument("--tests", default="/opt/rdma-core/tests", help="rdma-core's tests/")
    ap.add_argument("--module-timeout", type=int, default=300,
                    help="seconds a module may run before its process is killed")
    ap.add_argument("--test-timeout", type=int, default=60,
                    help="seconds a test may run before it is interrupted (SIGALRM)")
    ap.add_argument("modules", nargs="*", help="test modules (test_qp ...); default: all")
    args = ap.parse_args()

    # As run_tests.py: its directory first on the path (the tests import args_parser and
    # tests.*), its parser given the options.
    tests_dir = os.path.abspath(args.tests)
    sys.path[:0] = [tests_dir, os.path.dirname(tests_dir)]
    sys.argv = [os.path.join(tests_dir, "run_tests.py"), "--dev", args.dev,
                "--gid", str(args.gid)]
    from args_parser import parser  # noqa: E402 (the path above first)
    parser.parse_args()
    import tests  # noqa: E402 (imports every test module of the suite)

    by_name = {m.__name__.rsplit(".", 1)[-1]: m for m in tests.__test_modules__}
    names = args.modules or sorted(by_name)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        sys.exit(f"run_suite.py: no test module {' '.join(unknown)} in {tests_dir}")
    marker = f"/tmp/rdma-core-running-{os.getpid()}"
    for name in names:
        if os.path.exists(marker):
            os.unlink(marker)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            run_module(by_name[name], marker, args.test_timeout)
        outcome = "ok"
        deadline = started + args.module_timeout
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = None
                outcome = "timeout"
                break
            time.sleep(0.05)
        running = ""
        if status is not None and os.WIFSIGNALED(status):
            outcome = "crashed"
        elif status is not None and os.WEXITSTATUS(status) != 0:
            outcome = "crashed"
        if outcome != "ok" and os.path.exists(marker):
            with open(marker) as f:
                running = f.read().strip()
        if running:
            why = (f"crashed: {signal.Signals(os.WTERMSIG(status)).name}"
                   if status is not None and os.WIFSIGNALED(status)
                   else "crashed: exit status" if outcome == "crashed" else "timeout")
            say(f"@@@ RDMA-CORE TEST {running} error {why}")
        seconds = time.monotonic() - started
        say(f"@@@ RDMA-CORE MODULE {name} {outcome} seconds {seconds:.1f} {running}".rstrip())
    if os.path.exists(marker):
        os.unlink(marker)


if __name__ == "__main__":
    main()
