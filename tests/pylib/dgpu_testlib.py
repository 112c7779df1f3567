"""Helpers shared by the Python test suites (integration, durability, ha, ops): where the binaries
are, missing dependencies, free loopback ports, polling with a deadline, process liveness.
Python 3 standard library only. A suite imports it after putting this folder on sys.path:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
    import dgpu_testlib
"""

import http.client
import os
import socket
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def bin_dir():
    """$DGPU_BIN_DIR (set by CTest), else <repo>/build/bin."""
    return os.environ.get("DGPU_BIN_DIR") or os.path.join(REPO, "build", "bin")


def bin_path(name, must_exist=True):
    """Path of a dgpu binary; dgpu-agent may come from $DGPU_AGENT_BIN_DIR (e.g. a sanitized
    build). Raises RuntimeError when it is missing, unless must_exist is False."""
    d = bin_dir()
    if name == "dgpu-agent" and os.environ.get("DGPU_AGENT_BIN_DIR"):
        d = os.environ["DGPU_AGENT_BIN_DIR"]
    path = os.path.join(d, name)
    if must_exist and not os.access(path, os.X_OK):
        raise RuntimeError("%s not found (set DGPU_BIN_DIR or build the project)" % path)
    return path


def on_ci():
    """True when the environment says this run is CI: CI=true (CI services set it; so does .ci/run)."""
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def missing_dependency(test, message):
    """Ends `test` because a declared dependency (one that scripts/install-deps.sh installs) is
    missing: a failure on CI, where install-deps.sh ran, so the dependency must be there; a skip
    with `message` on a developer machine, which may lack it."""
    if on_ci():
        test.fail(message + " (CI=true: every declared dependency must be installed)")
    test.skipTest(message)


_handed_out = set()


def free_port():
    """A free loopback TCP port, never the same one twice in a process (a port just released
    could otherwise be handed to two daemons of one test)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


# Errors a predicate may raise while a daemon is starting or restarting: polled through.
TRANSIENT_ERRORS = (OSError, http.client.HTTPException, ValueError)


def wait_until(predicate, timeout, what="condition", interval=0.05):
    """Polls predicate() until it returns a truthy value, which is returned. Transient errors
    (connection refused, a half-written file) count as "not yet". Raises AssertionError naming
    `what`, the last value and the last error after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last, last_error = None, None
    while True:
        try:
            last = predicate()
            if last:
                return last
        except TRANSIENT_ERRORS as e:
            last_error = e
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s (last value: %r%s)"
                                 % (timeout, what, last,
                                    ", last error: %r" % last_error if last_error else ""))
        time.sleep(interval)


def pid_alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False
