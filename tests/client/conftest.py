"""Fixtures of the Python client's tests: the client package from clients/python, and a real
scheduler with real agents (fake GPUs) started by tests/integration/harness.py."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "tests", "ha"))
sys.path.insert(0, os.path.join(REPO, "tests", "pylib"))

import harness  # noqa: E402
from dgpu_testlib import on_ci  # noqa: E402


def missing_dependency(message):
    """Ends the test because a dependency that scripts/install-deps.sh installs is missing: a
    failure under CI=true, a skip elsewhere."""
    if on_ci():
        pytest.fail(message + " (CI=true: every declared dependency must be installed)")
    pytest.skip(message)


@pytest.fixture(scope="module")
def cluster():
    """A scheduler and two agents with four fake GPUs each, shared by a module's tests."""
    c = harness.Cluster("client")
    try:
        c.start(agents=2, gpus=4)
    except BaseException:
        sys.stderr.write(c.log_tails())
        c.shutdown()
        c.remove_files()
        raise
    yield c
    c.shutdown()
    c.remove_files()


def checked_client_class():
    """dgpu.Client whose every response is checked against api/openapi.yaml, as harness.http
    checks the integration suites' responses."""
    import urllib.parse

    import api_contract
    import dgpu

    class CheckedClient(dgpu.Client):
        def _send(self, method, url, data, headers):
            status, answer_headers, raw = super()._send(method, url, data, headers)
            api_contract.check_response(method, urllib.parse.urlsplit(url).path, status,
                                        answer_headers.get("Content-Type"), raw)
            return status, answer_headers, raw

    return CheckedClient


@pytest.fixture
def client(cluster):
    return checked_client_class()(cluster.base, retries=2, backoff=0.05)
