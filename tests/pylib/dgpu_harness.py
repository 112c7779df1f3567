"""The process and HTTP layer every Python suite drives the daemons through (integration, ha,
durability, ops, client): a daemon in its own process group with its output in files, and HTTP
requests to a scheduler whose every answer is checked against api/openapi.yaml
(api_contract.py). The suites build their clusters on top (tests/integration/harness.py,
tests/ha/ha_cluster.py, tests/durability/dgpu_proc.py). Python 3 standard library only.
"""

import calendar
from http import client as http_client
import json
import os
import re
import signal
import ssl
import subprocess
import time
import urllib.parse

import api_contract


def to_yaml(value):
    """JSON is a subset of YAML flow style: good enough for the daemons' configs."""
    return json.dumps(value, indent=1) + "\n"


def tail(path, lines=60):
    """The last `lines` lines of a text file ("" when it cannot be read)."""
    try:
        with open(path, "r", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z")
_KV = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def parse_event_lines(text, event):
    """Text-format log lines 'TIME level [comp] event=NAME k=v ...' -> [dict] with 't' (unix s)."""
    out = []
    for line in text.splitlines():
        if "event=" + event + " " not in line and not line.endswith("event=" + event):
            continue
        m = _LOG_TIME.match(line)
        if not m:
            continue
        t = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
        t += float(m.group(2) or 0)
        d = {"t": t, "line": line}
        for k, v in _KV.findall(line[line.index("event="):]):
            d[k] = v.strip('"')
        out.append(d)
    return out


# --- HTTP -----------------------------------------------------------------------------------------

class HttpResult:
    """status, headers (case-insensitive get), body (bytes), json (parsed, or None when the body
    is not JSON), parsed (the JSON, else the text, None when empty). Unpacks as
    `status, headers, json`."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body
        self.json = None
        self._is_json = False
        if body:
            try:
                self.json = json.loads(body.decode("utf-8"))
                self._is_json = True
            except (ValueError, UnicodeDecodeError):
                self.json = None

    @property
    def parsed(self):
        if self._is_json or not self.body:
            return self.json
        return self.body.decode("utf-8", "replace")

    def __iter__(self):
        return iter((self.status, self.headers, self.json))

    def __repr__(self):
        return "HttpResult(%d, %s)" % (self.status, self.body[:300])


class Http:
    """One keep-alive connection to a scheduler's REST API (https when `https` or `ca_file` is
    given; `ca_file` verifies it, else the system's CAs do); reconnects after an error. Every answer is checked against the description:
    one it does not allow raises api_contract.ContractViolation."""

    def __init__(self, port, timeout=10.0, ca_file=None, host="127.0.0.1", https=False):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.context = (ssl.create_default_context(cafile=ca_file) if ca_file or https
                        else None)
        self.conn = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, raw=None, headers=None):
        """`body` is sent as JSON (Content-Type application/json unless `headers` name one);
        `raw` (bytes or str) as it is. Returns an HttpResult, HTTP errors included. Raises
        OSError / HTTPException when no answer came (the connection is closed then)."""
        if self.conn is None:
            if self.context is not None:
                self.conn = http_client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                                        context=self.context)
            else:
                self.conn = http_client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        hdrs = dict(headers or {})
        data = None
        if raw is not None:
            data = raw.encode("utf-8") if isinstance(raw, str) else raw
        elif body is not None:
            data = json.dumps(body).encode("utf-8")
            if not any(k.lower() == "content-type" for k in hdrs):
                hdrs["Content-Type"] = "application/json"
        try:
            self.conn.request(method, path, body=data, headers=hdrs)
            resp = self.conn.getresponse()
            payload = resp.read()
        except Exception:
            self.close()
            raise
        api_contract.check_response(method, path, resp.status, resp.getheader("Content-Type"),
                                    payload)
        if (resp.getheader("Connection") or "").lower() == "close":
            self.close()
        return HttpResult(resp.status, resp.headers, payload)


def http(base, method, path, body=None, raw=None, headers=None, timeout=10, ca_file=None):
    """One request on a connection of its own to `base` ("http://127.0.0.1:PORT" or https);
    see Http.request."""
    u = urllib.parse.urlsplit(base)
    https = u.scheme == "https"
    c = Http(u.port, timeout=timeout, ca_file=ca_file if https else None, host=u.hostname,
             https=https)
    try:
        return c.request(method, path, body=body, raw=raw, headers=headers)
    finally:
        c.close()


# --- Processes ------------------------------------------------------------------------------------

class Daemon:
    """One daemon process, by default in its own process group (`new_session`), its stdout in
    `log_path` and its stderr there too or in `stderr_path`."""

    def __init__(self, name, argv, log_path, stderr_path=None, env=None, new_session=True):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.stderr_path = stderr_path
        self.env = env
        self.new_session = new_session
        self.proc = None
        self.stopped = False  # SIGSTOPped

    def start(self, argv=None, truncate_stderr=False):
        out = open(self.log_path, "ab")
        err = open(self.stderr_path, "wb" if truncate_stderr else "ab") if self.stderr_path \
            else None
        try:
            self.proc = subprocess.Popen(argv or self.argv, stdout=out,
                                         stderr=err if err is not None else subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         start_new_session=self.new_session, close_fds=True)
        finally:
            out.close()
            if err is not None:
                err.close()
        self.stopped = False
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        """`sig` to the daemon alone, while it runs."""
        if self.running():
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def signal_group(self, sig):
        """`sig` to the daemon's process group (what it started without a session of its own)."""
        if self.proc is None or not self.new_session:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def sigstop(self):
        self.signal(signal.SIGSTOP)
        self.stopped = True

    def sigcont(self):
        self.signal(signal.SIGCONT)
        self.stopped = False

    def kill9(self):
        """SIGKILL to the daemon only (not its group: the test decides what else dies); reaped."""
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.stopped = False

    def stop(self, timeout=10, group=True):
        """SIGTERM (a stopped daemon is continued first), wait up to `timeout`, then SIGKILL: the
        whole group when `group`, else the daemon. Returns the exit code."""
        if self.proc is None:
            return None
        if self.running():
            if self.stopped:
                self.sigcont()
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        if group:
            self.signal_group(signal.SIGKILL)
        if self.running():
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        return self.proc.returncode

    def log_text(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stderr_text(self):
        if self.stderr_path is None:
            return self.log_text()
        try:
            with open(self.stderr_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def events(self, event):
        return parse_event_lines(self.log_text(), event)

    def log_tails(self, lines=60):
        if self.stderr_path is None:
            return "---- %s (%s) ----\n%s\n" % (self.name, self.log_path, tail(self.log_path, lines))
        return ("---- %s stdout (%s) ----\n%s\n---- %s stderr ----\n%s\n"
                % (self.name, self.log_path, tail(self.log_path, lines), self.name,
                   tail(self.stderr_path, lines)))
