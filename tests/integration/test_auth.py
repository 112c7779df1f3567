"""Identity and access with the real scheduler and agents: bearer tokens and JWTs, roles on
every endpoint, a task's user and team taken from the identity, the per-user pending limit,
the tokens file reloaded on SIGHUP, the audit log, the protected mode of auth.mode none seen
from a peer that is not loopback (a network namespace joined by a veth pair), and slow clients
cut off by server.read_timeout and server.max_connections."""

import base64
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest

from harness import API, CTL_BIN, ClusterTestCase, NetNs, http, read_text, wait_until

TOKENS = {
    "vera": ("viewer", []),
    "alice": ("user", ["nlp"]),
    "bob": ("user", []),
    "olga": ("operator", []),
    "adam": ("admin", []),
}


def token_of(name):
    return "tok-%s-0123456789abcdef" % name


def tokens_yaml(names):
    users = []
    for name in names:
        role, teams = TOKENS[name]
        users.append({"name": name, "token_sha256": hashlib.sha256(token_of(name).encode())
                      .hexdigest(), "role": role, "teams": teams})
    return json.dumps({"users": users})


def auth(name):
    return {"Authorization": "Bearer " + token_of(name)}


class TokenAuthTest(ClusterTestCase):
    AGENTS = 1
    GPUS = 4
    MAX_PENDING = 3

    def start_cluster(self):
        self.tokens_file = os.path.join(self.c.tmp, "tokens.yaml")
        with open(self.tokens_file, "w") as f:
            f.write(tokens_yaml(TOKENS))
        self.audit_file = os.path.join(self.c.tmp, "audit.log")
        self.c.token = token_of("adam")  # The harness's own requests.
        self.c.start(agents=self.AGENTS, gpus=self.GPUS, extra={
            "auth": {"mode": "token", "tokens_file": self.tokens_file},
            "limits": {"max_pending_per_user": self.MAX_PENDING},
            "logging": {"audit_file": self.audit_file}})

    def call(self, who, method, path, body=None):
        """As `who` (None: no token; "bad": an unknown one), not as the harness's admin."""
        headers = auth(who) if who else {}
        if who == "bad":
            headers = {"Authorization": "Bearer not-a-known-token"}
        return http(self.c.base, method, path, body=body, headers=headers)

    def test_every_endpoint_by_role(self):
        # A task of bob's that others try to cancel, and a team to read.
        self.assertEqual(self.call("adam", "PUT", API + "/teams/nlp", {"online": 1}).status, 200)
        bobs = self.call("bob", "POST", API + "/tasks",
                         {"priority": "low", "gpu_count": 1, "command": "sleep 300"})
        self.assertEqual(bobs.status, 201, bobs)
        bob_task = bobs.json["task_id"]
        task = "/tasks/" + bob_task

        def submit(who):
            return self.call(who, "POST", API + "/tasks",
                             {"priority": "low", "gpu_count": 1, "command": "sleep 300"})

        read_routes = [("GET", API + "/tasks"), ("GET", API + task), ("GET", API + "/gpus"),
                       ("GET", API + "/quota"), ("GET", API + "/teams"),
                       ("GET", API + "/teams/nlp"), ("GET", API + "/agents")]
        # who -> expected status of: reads, submit, PUT quota, PUT team, DELETE team, snapshot
        expected = {
            None: (401, 401, 401, 401, 401, 401),
            "bad": (401, 401, 401, 401, 401, 401),
            "vera": (200, 403, 403, 403, 403, 403),
            "bob": (200, 201, 403, 403, 403, 403),
            "olga": (200, 201, 403, 403, 403, 403),
            "adam": (200, 201, 200, 200, 200, 200),
        }
        for who, (reads, sub, quota, team_put, team_del, snap) in expected.items():
            for method, path in read_routes:
                r = self.call(who, method, path)
                self.assertEqual(r.status, reads, (who, method, path, r))
            r = submit(who)
            self.assertEqual(r.status, sub, (who, r))
            if r.status == 201:
                self.call("adam", "DELETE", API + "/tasks/" + r.json["task_id"])
            r = self.call(who, "PUT", API + "/quota", {"online_percent": 0.7})
            self.assertEqual(r.status, quota, (who, r))
            r = self.call(who, "PUT", API + "/teams/scratch", {"batch": 0})
            self.assertEqual(r.status, team_put, (who, r))
            if who != "adam":
                self.call("adam", "PUT", API + "/teams/scratch", {"batch": 0})
            r = self.call(who, "DELETE", API + "/teams/scratch")
            self.assertEqual(r.status, team_del, (who, r))
            r = self.call(who, "GET", API + "/snapshot")
            self.assertEqual(r.status, snap, (who, r.status))
        # 401s say how to authenticate; 403s which role is needed.
        r = self.call(None, "GET", API + "/tasks")
        self.assertApiError(r, 401, "unauthenticated", "Authorization: Bearer")
        self.assertEqual(r.headers.get("WWW-Authenticate"), 'Bearer realm="dgpu"')
        r = self.call("bad", "GET", API + "/tasks")
        self.assertApiError(r, 401, "unauthenticated", "not known")
        self.assertEqual(r.headers.get("WWW-Authenticate"),
                         'Bearer realm="dgpu", error="invalid_token"')
        self.assertApiError(submit("vera"), 403, "forbidden",
                            'user "vera" (role viewer) may not submit_task; that needs role user')
        # Cancel: a user only its own, an operator any.
        self.assertApiError(self.call("vera", "DELETE", API + task), 403, "forbidden")
        self.assertApiError(self.call("alice", "DELETE", API + task), 403, "forbidden",
                            'may cancel only its own tasks; %s was submitted by "bob"' % bob_task)
        self.assertEqual(self.c.task(bob_task)["status"], "running")
        self.assertEqual(self.call("olga", "DELETE", API + task).status, 200)
        mine = submit("bob").json["task_id"]
        self.assertEqual(self.call("bob", "DELETE", API + "/tasks/" + mine).status, 200)
        # Open endpoints.
        for path in ("/healthz", "/readyz", API + "/openapi.yaml", "/metrics"):
            self.assertEqual(http(self.c.base, "GET", path).status, 200, path)

    def test_task_belongs_to_its_submitter(self):
        r = self.call("alice", "POST", API + "/tasks",
                      {"priority": "low", "gpu_count": 1, "command": "true"})
        self.assertEqual(r.status, 201, r)
        t = self.c.task(r.json["task_id"])
        self.assertEqual((t["user"], t["team"]), ("alice", "nlp"))
        self.assertApiError(
            self.call("alice", "POST", API + "/tasks",
                      {"priority": "low", "gpu_count": 1, "command": "true", "team": "vision"}),
            403, "forbidden", 'may not submit to team "vision"; its teams: nlp')
        self.assertApiError(
            self.call("alice", "POST", API + "/tasks",
                      {"priority": "low", "gpu_count": 1, "command": "true", "user": "bob"}),
            403, "forbidden", 'may not submit tasks as "bob"')
        # An admin may submit on another user's behalf.
        r = self.call("adam", "POST", API + "/tasks",
                      {"priority": "low", "gpu_count": 1, "command": "true", "user": "bob"})
        self.assertEqual(self.c.task(r.json["task_id"])["user"], "bob")

    def test_pending_limit_per_user(self):
        # 8 GPUs on a 4-GPU cluster: they stay pending.
        big = {"priority": "low", "gpu_count": 8, "command": "true"}
        ids = [self.call("bob", "POST", API + "/tasks", big).json["task_id"]
               for _ in range(self.MAX_PENDING)]
        r = self.call("bob", "POST", API + "/tasks", big)
        self.assertEqual(r.status, 429, r)
        self.assertApiError(r, 429, "too_many_pending", 'user "bob" has 3 pending tasks')
        # Others are not held back, and a cancel makes room again.
        self.assertEqual(self.call("olga", "POST", API + "/tasks", big).status, 201)
        self.assertEqual(self.call("bob", "DELETE", API + "/tasks/" + ids[0]).status, 200)
        self.assertEqual(self.call("bob", "POST", API + "/tasks", big).status, 201)

    def test_sighup_reloads_the_tokens_file(self):
        self.assertEqual(self.call("vera", "GET", API + "/tasks").status, 200)
        with open(self.tokens_file, "w") as f:
            f.write(tokens_yaml(["adam", "bob"]))  # vera is gone
        self.c.scheduler.signal_group(signal.SIGHUP)
        wait_until(lambda: self.call("vera", "GET", API + "/tasks").status == 401, 5,
                   what="vera's token refused after SIGHUP")
        self.assertEqual(self.call("bob", "GET", API + "/tasks").status, 200)
        # A broken file keeps the users loaded before.
        with open(self.tokens_file, "w") as f:
            f.write("users: [")
        self.c.scheduler.signal_group(signal.SIGHUP)
        wait_until(lambda: "cannot reload the tokens file" in read_text(self.c.scheduler.stdout_path),
                   5, what="reload error logged")
        self.assertEqual(self.call("bob", "GET", API + "/tasks").status, 200)
        log = read_text(self.c.scheduler.stdout_path)
        for name in TOKENS:
            self.assertNotIn(token_of(name), log)  # Secrets are never logged.

    def test_audit_log_records_write_requests(self):
        ok = self.call("alice", "POST", API + "/tasks",
                       {"priority": "low", "gpu_count": 1, "command": "true"})
        self.call("vera", "POST", API + "/tasks",
                  {"priority": "low", "gpu_count": 1, "command": "true"})
        self.call(None, "DELETE", API + "/tasks/" + ok.json["task_id"])
        self.call("alice", "GET", API + "/tasks")  # Reads are not recorded.

        def lines():
            with open(self.audit_file) as f:
                return [json.loads(line) for line in f]
        wait_until(lambda: len([entry for entry in lines() if entry["method"] != "PUT"]) >= 3, 5,
                   what="three audit lines")
        entries = [e for e in lines() if e["path"].startswith(API + "/tasks")]
        self.assertEqual(len(entries), 3, entries)
        first, second, third = entries
        self.assertEqual((first["user"], first["role"], first["method"], first["path"],
                          first["status"], first["task_id"]),
                         ("alice", "user", "POST", API + "/tasks", 201, ok.json["task_id"]))
        self.assertTrue(first["peer"].startswith("127.0.0.1:"), first)
        self.assertEqual((second["user"], second["status"]), ("vera", 403))
        self.assertEqual((third["user"], third["role"], third["status"], third["task_id"]),
                         (None, "none", 401, None))
        self.assertEqual(sorted(first.keys()),
                         ["method", "path", "peer", "role", "status", "task_id", "time", "user"])
        self.assertNotIn(token_of("alice"), read_text(self.audit_file))

    def test_dgpuctl_takes_its_token_from_the_environment_or_its_config_file(self):
        if not os.access(CTL_BIN, os.X_OK):
            self.skipTest("dgpuctl not built")
        env = dict(os.environ, DGPU_SERVER=self.c.base, HOME=self.c.tmp)
        env.pop("DGPU_TOKEN", None)
        env.pop("DGPU_CONFIG", None)
        env.pop("XDG_CONFIG_HOME", None)

        def ctl(*args):
            return subprocess.run([CTL_BIN] + list(args), env=env, capture_output=True,
                                  text=True, timeout=30)
        r = ctl("get", "tasks")
        self.assertEqual(r.returncode, 3, r)
        self.assertIn("(unauthenticated, HTTP 401); give a token with --token", r.stderr)
        env["DGPU_TOKEN"] = token_of("alice")
        r = ctl("submit", "--gpus", "1", "--priority", "low", "--", "sleep 60")
        self.assertEqual(r.returncode, 0, r)
        task = r.stdout.strip()
        self.assertEqual(self.c.task(task)["user"], "alice")
        # The config file, as a viewer: reads work, a cancel is refused naming the role.
        del env["DGPU_TOKEN"]
        os.makedirs(os.path.join(self.c.tmp, ".config", "dgpu"))
        config = os.path.join(self.c.tmp, ".config", "dgpu", "config.yaml")
        with open(config, "w") as f:
            f.write("token: %s\n" % token_of("vera"))
        os.chmod(config, 0o600)
        r = ctl("get", "task", task)
        self.assertEqual(r.returncode, 0, r)
        r = ctl("cancel", task)
        self.assertEqual(r.returncode, 3, r)
        self.assertIn('user "vera" (role viewer) may not cancel_task', r.stderr)
        r = ctl("--token", token_of("alice"), "cancel", task)
        self.assertEqual(r.returncode, 0, r)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


SECRET = b"jwt-test-secret-0123456789abcdef-0123"


def make_jwt(claims, secret=SECRET, alg="HS256"):
    signing = b64url(json.dumps({"alg": alg, "typ": "JWT"}).encode()) + "." + \
        b64url(json.dumps(claims).encode())
    sig = hmac.new(secret, signing.encode(), hashlib.sha256).digest()
    return signing + "." + b64url(sig)


class JwtAuthTest(ClusterTestCase):
    AGENTS = 1

    def claims(self, **over):
        c = {"iss": "https://idp.test", "aud": "dgpu", "sub": "jane", "role": "user",
             "teams": ["nlp"], "exp": int(time.time()) + 600}
        c.update(over)
        return c

    def start_cluster(self):
        secret_file = os.path.join(self.c.tmp, "jwt.secret")
        with open(secret_file, "wb") as f:
            f.write(SECRET + b"\n")
        self.c.token = make_jwt(self.claims(sub="root", role="admin"))
        self.c.start(agents=self.AGENTS, gpus=4, extra={
            "auth": {"mode": "jwt", "jwt": {"issuer": "https://idp.test", "audience": "dgpu",
                                            "hs256_secret_file": secret_file,
                                            "clock_skew": 0}}})

    def test_jwt_identity_and_each_refusal(self):
        body = {"priority": "low", "gpu_count": 1, "command": "true"}
        r = self.c.request("POST", API + "/tasks", body,
                           headers={"Authorization": "Bearer " + make_jwt(self.claims())})
        self.assertEqual(r.status, 201, r)
        t = self.c.task(r.json["task_id"])
        self.assertEqual((t["user"], t["team"]), ("jane", "nlp"))
        cases = [
            (self.claims(exp=int(time.time()) - 120), "expired at"),
            (self.claims(aud="other"), "this scheduler's audience is \"dgpu\""),
            (self.claims(iss="https://evil"), "issuer is \"https://evil\""),
        ]
        for claims, mention in cases:
            r = self.c.request("POST", API + "/tasks", body,
                               headers={"Authorization": "Bearer " + make_jwt(claims)})
            self.assertApiError(r, 401, "unauthenticated", mention)
        r = self.c.request("POST", API + "/tasks", body, headers={
            "Authorization": "Bearer " + make_jwt(self.claims(), secret=b"x" * 40)})
        self.assertApiError(r, 401, "unauthenticated", "signature does not verify")
        r = self.c.request("POST", API + "/tasks", body, headers={
            "Authorization": "Bearer " + make_jwt(self.claims(role="viewer"))})
        self.assertApiError(r, 403, "forbidden", "(role viewer) may not submit_task")


# ----------------------------------------------------------------------------------------------
# auth.mode none from a peer that is not loopback.

class ProtectedModeTest(ClusterTestCase):
    """The scheduler listens on every interface; a client in another network namespace
    (198.51.100.2 over a veth pair to 198.51.100.1) is not loopback."""

    AGENTS = 1
    INSECURE = False

    def setUp(self):
        tag = "%d%d" % (os.getpid() % 10000, int(self.INSECURE))
        self.net = NetNs(tag, "198.51.100.1", "198.51.100.2").create(self)
        self.ns = self.net.ns
        super().setUp()

    def start_cluster(self):
        self.c.start(agents=self.AGENTS, gpus=4, extra={
            "server": {"http_address": ":%d" % self.c.http_port,
                       "grpc_address": ":%d" % self.c.grpc_port},
            "auth": {"allow_insecure_remote": self.INSECURE}})

    def remote_get(self, path):
        r = subprocess.run(["ip", "netns", "exec", self.ns, "curl", "-s", "-m", "5", "-w",
                            "\n%{http_code}", "http://198.51.100.1:%d%s" % (self.c.http_port,
                                                                             path)],
                           capture_output=True, text=True)
        body, _, status = r.stdout.rpartition("\n")
        return int(status or 0), body

    def start_remote_agent(self):
        doc = self.c.agent_config("remote", gpus=2)
        doc["scheduler"]["master_address"] = "198.51.100.1:%d" % self.c.grpc_port
        return self.c.start_agent_from("agent-remote.1", doc, wrapper=self.net.wrapper(),
                                       track_as="remote")


class ProtectedModeRefusesRemotePeersTest(ProtectedModeTest):
    def test_remote_rest_and_agent_are_refused(self):
        status, body = self.remote_get(API + "/tasks")
        self.assertEqual(status, 403, body)
        err = json.loads(body)["error"]
        self.assertEqual(err["code"], "insecure_remote_access")
        self.assertIn("auth.allow_insecure_remote", err["message"])
        for path in ("/healthz", "/readyz", "/metrics"):
            self.assertEqual(self.remote_get(path)[0], 200, path)
        self.assertIn("refused a REST request from 198.51.100.2:",
                      read_text(self.c.scheduler.stdout_path))
        # Loopback is served as before.
        self.assertEqual(self.c.get(API + "/tasks").status, 200)
        agent = self.start_remote_agent()
        wait_until(lambda: "refused RegisterAgent call from ipv4:198.51.100.2"
                   in read_text(self.c.scheduler.stdout_path), 10, what="refusal logged")
        wait_until(lambda: "insecure_remote_access" in read_text(agent.stdout_path), 10,
                   what="the agent's log names the refusal")
        self.assertNotIn("remote", self.c.agents_view())


class ProtectedModeInsecureRemoteTest(ProtectedModeTest):
    INSECURE = True

    def test_allow_insecure_remote_serves_everyone(self):
        status, body = self.remote_get(API + "/tasks")
        self.assertEqual(status, 200, body)
        self.start_remote_agent()
        self.c.wait_agents_online(["remote"])


# ----------------------------------------------------------------------------------------------
# executor.run_as: submitter, with users made by the test.

def _run(cmd):
    for _ in range(20):  # /etc/passwd may be locked by another test's useradd.
        if subprocess.run(cmd, capture_output=True).returncode == 0:
            return True
        time.sleep(0.1)
    return False


class RunAsSubmitterTest(ClusterTestCase):
    AGENTS = 1

    def setUp(self):
        if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"):
            self.skipTest("needs root, useradd and setpriv")
        suffix = str(os.getpid())
        self.user, self.group = "dgpu-itu-" + suffix, "dgpu-itg-" + suffix
        self.assertTrue(_run(["groupadd", self.group]))
        self.addCleanup(_run, ["groupdel", self.group])
        self.assertTrue(_run(["useradd", "-M", "-N", "-s", "/bin/sh", "-G", self.group,
                              self.user]))
        self.addCleanup(_run, ["userdel", self.user])
        super().setUp()

    def start_cluster(self):
        os.chmod(self.c.tmp, 0o755)  # Tasks of the test user walk into the agent's work_dir.
        self.c.start(agents=1, gpus=4, agent_kwargs={
            "extra": {"executor": {"run_as": "submitter"}}})

    def test_task_runs_as_its_user_and_an_unknown_user_fails(self):
        def ids(flag):
            return subprocess.run(["id", flag, self.user], capture_output=True,
                                  text=True).stdout.strip()
        task = self.c.submit("id -u; id -G; touch mine", user=self.user)
        t = self.c.wait_finished(task)
        log = self.c.task_log("a1", task)
        self.assertEqual(t["status"], "success", (t, read_text(log)))
        self.assertEqual(read_text(log), "%s\n%s\n" % (ids("-u"), ids("-G")))
        self.assertEqual(str(os.stat(log).st_uid), ids("-u"))
        mine = os.path.join(self.c.work_dir("a1"), task, "mine")
        self.assertEqual(str(os.stat(mine).st_uid), ids("-u"))

        bad = self.c.submit("true", user="dgpu-nobody-here")
        t = self.c.wait_finished(bad)
        self.assertEqual(t["status"], "failed", t)
        self.assertEqual(t["error"], 'unknown_user: no user "dgpu-nobody-here" on this node')
        root = self.c.submit("true", user="root")
        t = self.c.wait_finished(root)
        self.assertEqual(t["status"], "failed", t)
        self.assertTrue(t["error"].startswith("root_not_allowed: "), t)


# ----------------------------------------------------------------------------------------------
# Slow clients.

class SlowClientTest(ClusterTestCase):
    AGENTS = 1
    HALF_OPEN = 200

    def start_cluster(self):
        self.c.start(agents=self.AGENTS, gpus=4, extra={
            "server": {"read_timeout": 1, "max_connections": self.HALF_OPEN + 20}})

    def half_open(self, n):
        socks = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", self.c.http_port), timeout=5)
            s.sendall(b"POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            socks.append(s)
        return socks

    @staticmethod
    def closed_by_server(s):
        s.settimeout(0.2)
        try:
            return s.recv(1) == b""
        except socket.timeout:
            return False
        except OSError:
            return True

    def test_half_sent_requests_are_cut_off(self):
        socks = self.half_open(self.HALF_OPEN)
        try:
            start = time.monotonic()
            wait_until(lambda: all(self.closed_by_server(s) for s in socks), 5,
                       what="every half-sent request closed")
            self.assertGreaterEqual(time.monotonic() - start, 0.5)
            self.assertEqual(self.c.get(API + "/tasks").status, 200)
        finally:
            for s in socks:
                s.close()


class ConnectionLimitTest(ClusterTestCase):
    AGENTS = 1
    LIMIT = 5

    def start_cluster(self):
        self.c.start(agents=self.AGENTS, gpus=4, extra={
            "server": {"read_timeout": 1.5, "max_connections": self.LIMIT}})

    def test_connections_over_the_limit_wait_for_one_to_close(self):
        time.sleep(2)  # The harness's own kept-alive connections time out.
        socks = [socket.create_connection(("127.0.0.1", self.c.http_port), timeout=5)
                 for _ in range(self.LIMIT)]
        for s in socks:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # headers never end
        try:
            start = time.monotonic()
            r = self.c.request("GET", "/healthz", timeout=10)
            waited = time.monotonic() - start
            self.assertEqual(r.status, 200)
            # Held back until the read timeout closed a slow connection.
            self.assertGreaterEqual(waited, 0.7, "answered at once despite the limit")
            self.assertLess(waited, 5)
            wait_until(lambda: "the most server.max_connections allows"
                       in read_text(self.c.scheduler.stdout_path), 5, what="limit logged")
        finally:
            for s in socks:
                s.close()


if __name__ == "__main__":
    unittest.main()
