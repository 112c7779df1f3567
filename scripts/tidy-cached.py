#!/usr/bin/env python3
"""clang-tidy over dgpu's sources, each file checked again only when something it depends on
changed.

    scripts/tidy-cached.py BUILD_DIR REGEX JOBS

Reads the build's compile database and, from ninja's dependency log (`ninja -t deps`), every
header each source includes. A file's key is a hash of the clang-tidy version, .clang-tidy, its
compile flags (with the source and build folders written as placeholders, so that a clone in
another folder shares the cache) and the content of the source and of every header it includes.
A file whose key is in the cache ($DGPU_TIDY_CACHE, default ~/.cache/dgpu/tidy) passed with
exactly those inputs and is skipped; the others run through clang-tidy, JOBS at a time, and
each that passes is added. Any finding fails the run, as `run-clang-tidy` does.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

CLANG_TIDY = os.environ.get("CLANG_TIDY", "clang-tidy")


def main():
    build, pattern, jobs = sys.argv[1], re.compile(sys.argv[2]), int(sys.argv[3])
    build = os.path.abspath(build)
    source = os.path.dirname(os.path.abspath(__file__)).rsplit("/scripts", 1)[0]
    cache = os.environ.get("DGPU_TIDY_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "dgpu", "tidy"))
    os.makedirs(cache, exist_ok=True)

    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [e for e in json.load(f) if pattern.search(e["file"])]
    deps = dependencies(build)
    digests = {}

    def digest(path):
        if path not in digests:
            h = hashlib.sha256()
            try:
                with open(path, "rb") as f:
                    h.update(f.read())
            except OSError:
                h.update(b"<missing>")
            digests[path] = h.hexdigest()
        return digests[path]

    def relative(text):
        return text.replace(build, "<build>").replace(source, "<source>")

    base = hashlib.sha256()
    base.update(subprocess.run([CLANG_TIDY, "--version"], capture_output=True,
                               text=True).stdout.encode())
    with open(os.path.join(source, ".clang-tidy"), "rb") as f:
        base.update(f.read())

    todo, skipped = [], 0
    for e in entries:
        inputs = deps.get(os.path.normpath(os.path.join(e["directory"], object_of(e))))
        if inputs is None:  # Not built yet, or built before the dependency log: check it.
            todo.append(e)
            continue
        h = base.copy()
        h.update(relative(e.get("command") or shlex.join(e["arguments"])).encode())
        for path in sorted(set(inputs) | {e["file"]}):
            h.update(relative(path).encode() + b"\0" + digest(path).encode() + b"\0")
        e["key"] = h.hexdigest()
        if os.path.exists(os.path.join(cache, e["key"])):
            skipped += 1
        else:
            todo.append(e)

    print("tidy: %d files, %d unchanged since they passed (cache %s), %d to check"
          % (len(entries), skipped, cache, len(todo)), flush=True)
    failed = []

    def check(e):
        out = subprocess.run([CLANG_TIDY, "-p", build, "--quiet", e["file"]],
                             capture_output=True, text=True)
        return e, out

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for e, out in pool.map(check, todo):
            findings = out.returncode != 0
            if findings:
                failed.append(e["file"])
                sys.stdout.write(out.stdout + out.stderr)
            elif "key" in e:
                open(os.path.join(cache, e["key"]), "w").close()
            sys.stdout.flush()
    if failed:
        print("tidy: findings in %d file(s):\n  %s" % (len(failed), "\n  ".join(failed)))
        return 1
    return 0


def object_of(entry):
    """The object file a compile database entry makes (its `output`, else its -o)."""
    if "output" in entry:
        return entry["output"]
    args = entry.get("arguments") or shlex.split(entry["command"])
    for i, a in enumerate(args[:-1]):
        if a == "-o":
            return args[i + 1]
    return ""


def dependencies(build):
    """{absolute object path: [absolute paths of its inputs]} from ninja's dependency log."""
    out = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True)
    deps, current = {}, None
    for line in out.stdout.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" "):
            target = line.split(":", 1)[0]
            stale = "(STALE)" in line
            current = None if stale else os.path.normpath(os.path.join(build, target))
            if current is not None:
                deps[current] = []
        elif current is not None:
            deps[current].append(os.path.normpath(os.path.join(build, line.strip())))
    return deps


if __name__ == "__main__":
    sys.exit(main())
