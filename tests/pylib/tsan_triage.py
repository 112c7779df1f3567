#!/usr/bin/env python3
"""Sorts ThreadSanitizer reports into dgpu's own and third-party ones.

Debian ships gRPC, absl and protobuf without ThreadSanitizer, so TSan cannot see the
synchronisation inside them (their completion queues, absl::Mutex, thread start-up) and reports
races on memory that they hand from one thread to another. A suppression cannot tell those apart
from dgpu's races: TSan suppresses a report when any frame of its stacks matches, and every
gRPC handler of dgpu runs below gRPC's frames. This script looks at who made each access
instead: the top frame of its stack after the sanitizer's own interceptors and the C++ standard
library's headers. A report is dgpu's when every access in it was made by dgpu's code (a frame
in the repository's src/); those fail the run and are printed in full. Reports where gRPC, absl
or protobuf code made one of the accesses are counted, by top frame, and listed briefly.

Usage: tsan_triage.py REPORT_DIR   (exit status 1 when a report is dgpu's)
"""
import collections
import pathlib
import re
import sys

FRAME = re.compile(r"^\s+#\d+\s+(?P<func>.*)\s+(?P<file>\S+)\s+\((?P<module>[^+)]+)(\+0x[0-9a-f]+)?\)\s*$")
ACCESS = re.compile(r"^\s+(Previous )?(atomic )?(Atomic )?(read|write|Read|Write) of size")
OTHER_STACK = re.compile(r"^\s+(Mutex|Thread|Location|Previous|Atomic|Read|Write|Cycle)")


def is_runtime(frame):
    """Frames that say nothing about who made the access: the sanitizer, libc, libstdc++."""
    module = frame["module"]
    file = frame["file"]
    return (module.startswith(("libtsan", "libc.so", "libstdc++", "ld-linux"))
            or "sanitizer" in file or file.startswith("/usr/include/c++/"))


def is_dgpu(frame):
    file = frame["file"]
    if file in ("<null>", "??"):
        return frame["module"].startswith("dgpu")
    # protoc's generated code runs where libprotobuf drives it (parsing, serialising).
    return not file.startswith("/usr/") and ".pb." not in file


def owner(stack):
    """'dgpu' or 'third-party' for one access stack, and the frame that decided it."""
    for frame in stack:
        if not is_runtime(frame):
            return ("dgpu" if is_dgpu(frame) else "third-party"), frame
    return "third-party", stack[0] if stack else {"func": "<empty>", "file": "", "module": ""}


def parse(report):
    """The access stacks of one report: lists of frames."""
    stacks, current, kind = [], None, report.splitlines()[1] if "\n" in report else report
    data_race = "data race" in kind
    for line in report.splitlines()[2:]:
        starts = ACCESS.match(line) if data_race else (line.startswith("  ") and not line.startswith("    "))
        if line.startswith("  Location is") or line.startswith("  Thread T") or line.startswith("  Mutex M"):
            current = None
            continue
        if starts:
            current = []
            stacks.append(current)
            continue
        match = FRAME.match(line)
        if match and current is not None:
            current.append(match.groupdict())
    return kind, stacks


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    reports = []
    for path in sorted(pathlib.Path(sys.argv[1]).glob("*")):
        text = path.read_text(errors="replace")
        for chunk in text.split("==================\n"):
            if chunk.startswith("WARNING: ThreadSanitizer"):
                reports.append((path.name, "==================\n" + chunk))
    ours, theirs = [], collections.Counter()
    for name, report in reports:
        kind, stacks = parse(report)
        owners = [owner(stack) for stack in stacks if stack]
        if owners and all(who == "dgpu" for who, _ in owners):
            ours.append((name, report))
        else:
            frame = next((f for who, f in owners if who == "third-party"), {"func": kind})
            theirs[frame["func"][:120]] += 1
    for name, report in ours:
        print(f"--- {name}\n{report}")
    print(f"ThreadSanitizer: {len(reports)} reports, {len(ours)} in dgpu's code, "
          f"{sum(theirs.values())} with an access made by uninstrumented third-party code")
    for func, count in theirs.most_common(10):
        print(f"  {count:5d}  {func}")
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main())
