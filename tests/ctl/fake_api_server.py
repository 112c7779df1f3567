#!/usr/bin/env python3
"""A fake dgpu scheduler REST API for dgpuctl tests.

Serves canned responses that follow the /api/v1 contract, on 127.0.0.1 and an ephemeral port.
Prints the port on the first line of stdout, then serves until killed. Every request is appended
to the --record file as one JSON line: {"method", "path", "body", "content_type"}.

With --standby LEADER every API request is answered 503 with header X-Leader: LEADER.

Teams (GET/PUT/DELETE /api/v1/teams[/NAME]) keep their state while the server runs, so that a
test can change a team and read it back.
"""

import argparse
import copy
import json
import re
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

NOW = "2024-05-01T12:00:00Z"


def task(task_id, **fields):
    base = {
        "task_id": task_id,
        "name": "",
        "priority": "low",
        "gpu_count": 1,
        "gpu_model": "",
        "command": "true",
        "env": {},
        "timeout_seconds": None,
        "image": "",
        "status": "pending",
        "node_id": "",
        "allocated_gpus": [],
        "pending_reason": "",
        "attempts": 0,
        "exit_code": None,
        "error": "",
        "created_at": "2024-05-01T11:00:00Z",
        "started_at": None,
        "finished_at": None,
        "team": "default",
        "user": "",
        "preemptible": True,
        "preemption_grace_seconds": -1,
        "borrowed": False,
        "preemptions": 0,
    }
    base.update(fields)
    return base


# Newest first, as GET /tasks returns them.
TASKS = [
    task("task-4", name="eval", priority="high", gpu_count=1, command="python eval.py",
         status="failed", node_id="node-b", allocated_gpus=["node-b-gpu-1"], attempts=1,
         exit_code=2, error="CUDA out of memory", created_at="2024-04-28T12:00:00Z",
         started_at="2024-04-28T12:00:05Z", finished_at="2024-04-28T12:10:05Z", team="vision"),
    task("task-3", name="prep", priority="low", gpu_count=1, command="sh prep.sh",
         status="success", node_id="node-b", allocated_gpus=["node-b-gpu-0"], attempts=1,
         exit_code=0, created_at="2024-04-30T12:00:00Z", started_at="2024-04-30T12:00:01Z",
         finished_at="2024-04-30T13:30:01Z"),
    task("task-2", name="train-llm", priority="low", gpu_count=8, gpu_model="A100",
         command="torchrun train.py", status="pending", pending_reason="quota_exhausted",
         created_at="2024-05-01T11:00:00Z", team="research", user="alice", attempts=1,
         error="preempted", preemptions=1),
    task("task-1", name="infer-bert", priority="high", gpu_count=2, gpu_model="A100",
         command="python serve.py --port 8000", env={"MODEL": "bert", "BATCH": "16"},
         timeout_seconds=7200, image="nvcr.io/nvidia/pytorch:24.01-py3", status="running",
         node_id="node-a", allocated_gpus=["node-a-gpu-0", "node-a-gpu-1"], attempts=1,
         created_at="2024-05-01T11:55:00Z", started_at="2024-05-01T11:55:02Z", team="vision",
         user="bob", preemption_grace_seconds=60, borrowed=True),
]

# Tasks that change state as they are polled: the status returned by the n-th GET.
POLLED = {
    "task-5": ["running", "running", "success"],
    "task-6": ["running", "failed"],
}
polls = {}

LOGS = {"task-3": "preparing\ndone\n"}

GPUS = {
    "total": 4, "idle": 1, "busy": 2, "offline": 1,
    "gpus": [
        {"id": "node-a-gpu-0", "node_id": "node-a", "index": 0, "model": "A100",
         "memory_mb": 81920, "status": "busy", "current_task": "task-1"},
        {"id": "node-a-gpu-1", "node_id": "node-a", "index": 1, "model": "A100",
         "memory_mb": 81920, "status": "busy", "current_task": "task-1"},
        {"id": "node-b-gpu-0", "node_id": "node-b", "index": 0, "model": "T4",
         "memory_mb": 15360, "status": "idle", "current_task": ""},
        {"id": "node-b-gpu-1", "node_id": "node-b", "index": 1, "model": "T4",
         "memory_mb": 15360, "status": "offline", "current_task": ""},
    ],
}

QUOTA = {
    "total_gpus": 4,
    "online": {"quota": 3, "used": 2, "available": 1, "borrowed": 0, "lent": 0},
    "batch": {"quota": 1, "used": 0, "available": 1, "borrowed": 0, "lent": 0},
    "online_percent": 0.75,
    "batch_percent": 0.25,
}

TEAM_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def team(configured=True, online=(0, 0, 0), batch=(0, 0, 0), max_gpus=None, weight=1.0,
         pending=0, usage=0.0):
    def klass(numbers):
        return dict(zip(("guaranteed", "used", "borrowed"), numbers))
    return {"configured": configured, "online": klass(online), "batch": klass(batch),
            "max_gpus": max_gpus, "weight": weight, "pending": pending,
            "usage_gpu_seconds": usage}


# By name; vision runs task-1 on two online GPUs, one beyond its guarantee.
TEAMS = {
    "default": team(configured=False, usage=5400.0),
    "research": team(batch=(1, 0, 0), max_gpus=8, pending=1),
    "vision": team(online=(1, 2, 1), weight=2.0, usage=1234.5),
}


def team_json(name):
    return dict(TEAMS[name], name=name)


def set_team(name, request):
    """PUT /api/v1/teams/NAME: the fields given change, the others keep their value."""
    if not TEAM_NAME.match(name):
        return error(400, "invalid_field", "team names are 1 to 63 characters of a-z, 0-9, '_' "
                     "and '-', starting with a letter or digit, got '%s'" % name)
    if not isinstance(request, dict):
        return error(400, "invalid_json", "the body must be a JSON object")
    for key in request:
        if key not in ("online", "batch", "max_gpus", "weight"):
            return error(400, "unknown_field", 'unknown field "%s"' % key)
    for key in ("online", "batch", "max_gpus"):
        value = request.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return error(400, "invalid_field", "%s must be an integer, 0 or more" % key)
    weight = request.get("weight")
    if weight is not None and (not isinstance(weight, (int, float)) or isinstance(weight, bool)
                               or not weight > 0):
        return error(400, "invalid_field", "weight must be a number above 0")
    updated = copy.deepcopy(TEAMS.get(name, team()))
    if not updated["configured"]:
        # A team without limits gets the defaults: no guarantee, no cap, weight 1.
        updated.update(configured=True, max_gpus=None, weight=1.0)
        updated["online"]["guaranteed"] = updated["batch"]["guaranteed"] = 0
    for klass in ("online", "batch"):
        if request.get(klass) is None:
            continue
        others = sum(t[klass]["guaranteed"] for n, t in TEAMS.items() if n != name)
        if others + request[klass] > QUOTA[klass]["quota"]:
            return error(400, "invalid_field",
                         "%s: the %s guarantees would add up to %d GPUs, more than the %s quota "
                         "of %d" % (klass, klass, others + request[klass], klass,
                                    QUOTA[klass]["quota"]))
        updated[klass]["guaranteed"] = request[klass]
    if "max_gpus" in request:
        updated["max_gpus"] = request["max_gpus"]
    if weight is not None:
        updated["weight"] = float(weight)
    TEAMS[name] = updated
    return 200, team_json(name)


def delete_team(name):
    if name not in TEAMS or not TEAMS[name]["configured"]:
        return error(404, "not_found", "team %s has no limits to delete" % name)
    pending = sum(1 for t in TASKS if t["team"] == name and t["status"] == "pending")
    held = sum(t["gpu_count"] for t in TASKS if t["team"] == name and t["status"] == "running")
    if pending or held:
        return error(409, "conflict", "team %s has %d pending task(s) and holds %d GPU(s); delete "
                     "it once they have ended" % (name, pending, held))
    del TEAMS[name]
    return 200, {"name": name, "deleted": True}

AGENTS = {
    "agents": [
        {"id": "node-a", "address": "10.0.0.1:50051", "status": "online", "gpus": 2,
         "free_gpus": 0, "cpus": 8, "memory_mb": 65536, "allocated_cpus": 6.5,
         "allocated_memory_mb": 32768, "isolation": "cgroup_v1", "tasks": 1,
         "last_heartbeat": "2024-05-01T11:59:57Z", "labels": {"rack": "r1"},
         "nvlink_groups": [[0, 1]]},
        {"id": "node-b", "address": "10.0.0.2:50051", "status": "offline", "gpus": 2,
         "last_heartbeat": "2024-05-01T11:40:00Z"},
    ]
}


def error(status, code, message):
    return status, {"error": {"code": code, "message": message}}


def find_task(task_id):
    if task_id in POLLED:
        sequence = POLLED[task_id]
        n = polls.get(task_id, 0)
        polls[task_id] = n + 1
        status = sequence[min(n, len(sequence) - 1)]
        fields = {"status": status, "node_id": "node-a", "attempts": 1}
        if status in ("success", "failed"):
            fields["exit_code"] = 0 if status == "success" else 1
        if status == "failed":
            fields["error"] = "process exited with code 1"
        return task(task_id, **fields)
    for t in TASKS:
        if t["task_id"] == task_id:
            return t
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    standby_leader = None
    record_path = None

    def log_message(self, fmt, *args):
        pass

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length).decode("utf-8") if length else ""

    def _send(self, status, payload, headers=None, text=False):
        data = payload.encode() if text else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method):
        body = self._body()
        if self.record_path:
            with open(self.record_path, "a") as f:
                f.write(json.dumps({"method": method, "path": self.path, "body": body,
                                    "content_type": self.headers.get("Content-Type", "")}) + "\n")
        url = urlsplit(self.path)
        if self.standby_leader is not None and url.path.startswith("/api/v1/"):
            status, payload = error(503, "unavailable", "this scheduler is a standby")
            self._send(status, payload, {"X-Leader": self.standby_leader})
            return
        result = self._route(method, url.path, parse_qs(url.query), body)
        if len(result) == 3:
            self._send(result[0], result[1], text=True)
        else:
            self._send(*result)

    def _route(self, method, path, query, body):
        parts = path.split("/")
        if path == "/api/v1/tasks" and method == "POST":
            if "application/json" not in self.headers.get("Content-Type", ""):
                return error(415, "unsupported_media_type", "the body must be JSON")
            try:
                request = json.loads(body)
            except ValueError:
                return error(400, "invalid_argument", "the body is not valid JSON")
            if not isinstance(request.get("gpu_count"), int) or request["gpu_count"] < 1:
                return error(400, "invalid_argument", "gpu_count must be at least 1")
            if request.get("priority") not in ("high", "low"):
                return error(400, "invalid_argument", "priority must be high or low")
            if "team" in request and not TEAM_NAME.match(str(request["team"])):
                return error(400, "invalid_field", "team must be 1 to 63 characters of a-z, 0-9, "
                             "'_' and '-', starting with a letter or digit; got \"%s\""
                             % request["team"])
            if not isinstance(request.get("preemptible", True), bool):
                return error(400, "invalid_field", "preemptible must be true or false")
            grace = request.get("preemption_grace_seconds", 0)
            if not isinstance(grace, int) or isinstance(grace, bool) or grace < 0:
                return error(400, "invalid_field",
                             "preemption_grace_seconds must be between 0 and 86400")
            return 201, {"task_id": "task-7", "status": "pending", "created_at": NOW}
        if path == "/api/v1/tasks" and method == "GET":
            tasks = [t for t in TASKS
                     if all(t[k] == query[k][0] for k in ("status", "priority", "team")
                            if k in query)]
            offset = int(query.get("offset", ["0"])[0])
            limit = int(query.get("limit", ["50"])[0])
            return 200, {"tasks": tasks[offset:offset + limit], "total": len(tasks)}
        if len(parts) == 5 and path.startswith("/api/v1/tasks/"):
            t = find_task(parts[4])
            if method == "GET":
                if t is None:
                    return error(404, "not_found", "task %s not found" % parts[4])
                return 200, t
            if method == "DELETE":
                if t is None:
                    return error(404, "not_found", "task %s not found" % parts[4])
                if t["status"] in ("success", "failed", "cancelled"):
                    return error(409, "conflict", "task %s already finished" % parts[4])
                return 200, {"message": "Task cancelled"}
            return error(405, "method_not_allowed", "%s is not allowed here" % method)
        if len(parts) == 6 and parts[5] == "logs" and parts[4] in LOGS and method == "GET":
            text = LOGS[parts[4]]
            if "tail" in query:
                n = int(query["tail"][0])
                text = "".join(text.splitlines(True)[-n:]) if n > 0 else ""
            return 200, text, "text"
        if path == "/api/v1/gpus" and method == "GET":
            return 200, GPUS
        if path == "/api/v1/agents" and method == "GET":
            return 200, AGENTS
        if path == "/api/v1/teams" and method == "GET":
            return 200, {"teams": [team_json(name) for name in sorted(TEAMS)]}
        if len(parts) == 5 and path.startswith("/api/v1/teams/"):
            name = unquote(parts[4])
            if method == "GET":
                if name not in TEAMS:
                    return error(404, "not_found", "team %s not found" % name)
                return 200, team_json(name)
            if method == "PUT":
                if "application/json" not in self.headers.get("Content-Type", ""):
                    return error(415, "unsupported_media_type", "the body must be JSON")
                try:
                    request = json.loads(body)
                except ValueError:
                    return error(400, "invalid_json", "the body is not valid JSON")
                return set_team(name, request)
            if method == "DELETE":
                return delete_team(name)
            return error(405, "method_not_allowed", "%s is not allowed here" % method)
        if path == "/api/v1/quota" and method == "GET":
            return 200, QUOTA
        if path == "/api/v1/quota" and method == "PUT":
            try:
                value = json.loads(body).get("online_percent")
            except (ValueError, AttributeError):
                value = None
            if not isinstance(value, (int, float)) or not 0 <= value <= 1:
                return error(400, "invalid_argument", "online_percent must be in [0,1]")
            return 200, {"message": "Quota updated"}
        return error(404, "not_found", "no route for %s %s" % (method, path))

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_DELETE(self):
        self._handle("DELETE")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--standby", metavar="LEADER", help="answer 503 with this X-Leader")
    parser.add_argument("--record", metavar="FILE", help="append each request to FILE")
    args = parser.parse_args()
    Handler.standby_leader = args.standby
    Handler.record_path = args.record
    server = HTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
