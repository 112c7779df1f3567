#!/usr/bin/env python3
"""N watchers of GET /api/v1/watch in one process, for benchmarks: each connection reads its
stream as fast as it comes and counts task events. Runs until SIGTERM/SIGINT, then prints one
line: watchers still connected, task events per watcher (min / max) and MiB received.

  bench/watch_clients.py --port 8080 --watchers 100 [--token T] [--deflate]

With --deflate the clients ask for the stream compressed (Accept-Encoding: deflate), as browsers
do, and inflate it to count the events; MiB are then the compressed bytes received.
"""

import argparse
import resource
import selectors
import signal
import socket
import sys
import zlib

MARK = b"\nevent: task\n"


def count_inflated(st, data):
    """De-chunks the HTTP body (after its headers) and inflates it, counting task events."""
    st["raw"] += data
    raw = st["raw"]
    if st["head"]:
        end = raw.find(b"\r\n\r\n")
        if end < 0:
            return
        raw, st["head"] = raw[end + 4:], False
    out = []
    while True:
        line_end = raw.find(b"\r\n")
        if line_end < 0:
            break
        size = int(raw[:line_end].split(b";")[0], 16)
        if len(raw) < line_end + 2 + size + 2:
            break
        out.append(raw[line_end + 2:line_end + 2 + size])
        raw = raw[line_end + 2 + size + 2:]
    st["raw"] = raw
    text = st["tail"] + st["inflate"].decompress(b"".join(out))
    st["events"] += text.count(MARK)
    st["tail"] = text[-(len(MARK) - 1):]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--watchers", type=int, default=100)
    p.add_argument("--token", default="")
    p.add_argument("--deflate", action="store_true")
    args = p.parse_args()

    request = "GET /api/v1/watch HTTP/1.1\r\nHost: %s\r\n" % args.host
    if args.token:
        request += "Authorization: Bearer %s\r\n" % args.token
    if args.deflate:
        request += "Accept-Encoding: deflate\r\n"
    request = (request + "\r\n").encode()
    sel = selectors.DefaultSelector()
    state = {}
    for _ in range(args.watchers):
        s = socket.create_connection((args.host, args.port))
        s.sendall(request)
        s.setblocking(False)
        state[s] = {"events": 0, "bytes": 0, "tail": b"", "raw": b"", "head": True,
                    "inflate": zlib.decompressobj()}
        sel.register(s, selectors.EVENT_READ)
    print("watchers connected: %d" % len(state), flush=True)

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    closed = 0
    while not stop:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            try:
                n = s.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                n = 0
            st = state[s]
            if n == 0:
                sel.unregister(s)
                s.close()
                closed += 1
                continue
            st["bytes"] += n
            if args.deflate:
                count_inflated(st, bytes(view[:n]))
                continue
            # Count marks, including one split across two reads.
            chunk = st["tail"] + bytes(view[:min(n, len(MARK) - 1)])
            st["events"] += chunk.count(MARK) + buf.count(MARK, 0, n)
            st["tail"] = bytes(view[max(0, n - len(MARK) + 1):n])
    events = [st["events"] for st in state.values()]
    mib = sum(st["bytes"] for st in state.values()) / (1 << 20)
    use = resource.getrusage(resource.RUSAGE_SELF)
    print("watchers: %d connected at the end, %d closed; task events per watcher: min %d, "
          "max %d; received %.1f MiB; client CPU %.1f s" %
          (len(state) - closed, closed, min(events), max(events), mib,
           use.ru_utime + use.ru_stime), flush=True)


if __name__ == "__main__":
    sys.exit(main())
