#!/usr/bin/python3
"""The reader child of the fault tests: reads files of a mount on threads and reports.

    fault_reader.py SPEC    SPEC is JSON: {"jobs": [[path, ...], ...], "loop": bool,
                            "expect": {path: sha256}, "stop": path, "limit": seconds}

One thread per job. Once through ("loop" false), each path is read and reported as it ends;
in a loop, a thread reads its paths over and over, checking them against "expect", until
the "stop" file appears, an error ends it (after one more read, reported as "then"), or
"limit" seconds pass. Reads go past the page cache (POSIX_FADV_DONTNEED first), so each one
reaches the daemon. Events go to stdout, one JSON object a line, each with its time on the
monotonic clock ("at"); every thread ends with {"t": thread, "end": true}.
"""
import hashlib
import json
import os
import sys
import threading
import time

OUT = threading.Lock()


def emit(**event):
    event["at"] = time.monotonic()
    with OUT:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def read(path):
    """["ok", sha256, length] of the whole file, or ["err", errno]."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            digest, length = hashlib.sha256(), 0
            while chunk := os.read(fd, 1 << 20):
                digest.update(chunk)
                length += len(chunk)
        finally:
            os.close(fd)
        return ["ok", digest.hexdigest(), length]
    except OSError as e:
        return ["err", e.errno]


def once(spec, t, paths):
    for i, path in enumerate(paths):
        emit(t=t, i=i, path=path, result=read(path))


def loop(spec, t, paths):
    deadline = time.monotonic() + spec["limit"]
    passes = 0
    while not os.path.exists(spec["stop"]) and time.monotonic() < deadline:
        bad = []
        for k, path in enumerate(paths):
            result = read(path)
            if result[0] == "err":
                then = read(paths[(k + 1) % len(paths)])
                emit(t=t, path=path, error=result[1], then=then)
                return
            if result[1] != spec["expect"][path]:
                bad.append(path)
        passes += 1
        emit(t=t, passes=passes, bad=bad)


def run(spec, t, paths):
    try:
        (loop if spec["loop"] else once)(spec, t, paths)
    finally:
        emit(t=t, end=True)


def main():
    spec = json.loads(sys.argv[1])
    threads = [threading.Thread(target=run, args=(spec, t, paths))
               for t, paths in enumerate(spec["jobs"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
