#!/usr/bin/env python3
"""A fake dgpu scheduler REST API for dgpuctl tests.

Serves canned responses that follow the /api/v1 contract, on 127.0.0.1 and an ephemeral port.
Prints the port on the first line of stdout, then serves until killed. Every request is appended
to the --record file as one JSON line: {"method", "path", "body", "content_type"}.

With --standby LEADER every API request is answered 503 with header X-Leader: LEADER.
"""

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlsplit

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
    }
    base.update(fields)
    return base


# Newest first, as GET /tasks returns them.
TASKS = [
    task("task-4", name="eval", priority="high", gpu_count=1, command="python eval.py",
         status="failed", node_id="node-b", allocated_gpus=["node-b-gpu-1"], attempts=1,
         exit_code=2, error="CUDA out of memory", created_at="2024-04-28T12:00:00Z",
         started_at="2024-04-28T12:00:05Z", finished_at="2024-04-28T12:10:05Z"),
    task("task-3", name="prep", priority="low", gpu_count=1, command="sh prep.sh",
         status="success", node_id="node-b", allocated_gpus=["node-b-gpu-0"], attempts=1,
         exit_code=0, created_at="2024-04-30T12:00:00Z", started_at="2024-04-30T12:00:01Z",
         finished_at="2024-04-30T13:30:01Z"),
    task("task-2", name="train-llm", priority="low", gpu_count=8, gpu_model="A100",
         command="torchrun train.py", status="pending", pending_reason="quota_exhausted",
         created_at="2024-05-01T11:00:00Z"),
    task("task-1", name="infer-bert", priority="high", gpu_count=2, gpu_model="A100",
         command="python serve.py --port 8000", env={"MODEL": "bert", "BATCH": "16"},
         timeout_seconds=7200, image="nvcr.io/nvidia/pytorch:24.01-py3", status="running",
         node_id="node-a", allocated_gpus=["node-a-gpu-0", "node-a-gpu-1"], attempts=1,
         created_at="2024-05-01T11:55:00Z", started_at="2024-05-01T11:55:02Z"),
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
    "online": {"quota": 3, "used": 2, "available": 1},
    "batch": {"quota": 1, "used": 0, "available": 1},
}

AGENTS = {
    "agents": [
        {"id": "node-a", "address": "10.0.0.1:50051", "status": "online", "gpus": 2,
         "last_heartbeat": "2024-05-01T11:59:57Z"},
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
            return 201, {"task_id": "task-7", "status": "pending", "created_at": NOW}
        if path == "/api/v1/tasks" and method == "GET":
            tasks = [t for t in TASKS
                     if all(t[k] == query[k][0] for k in ("status", "priority") if k in query)]
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
            offset = int(query.get("offset", ["0"])[0])
            return 200, LOGS[parts[4]][offset:], "text"
        if path == "/api/v1/gpus" and method == "GET":
            return 200, GPUS
        if path == "/api/v1/agents" and method == "GET":
            return 200, AGENTS
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
