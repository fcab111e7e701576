#!/usr/bin/python3
"""Archives at dataset scale: a COCO-shaped zip and an ImageNet-shaped .tar.gz, byte-exact.

    sudo /usr/bin/python3 tools/bench/archive_scale.py [--coco 118287]
        [--imagenet-classes 1000 --imagenet-per-class 40] [--mean-kb 6] [--work /var/tmp]

Two generated datasets of small JPEG-like files (a JFIF header, a padding segment that
deflate shrinks, random bytes, an EOI marker; sizes spread evenly from half to 1.5x
--mean-kb; one file in ten is random bytes throughout, which no compressor shrinks):

  COCO-shaped      train2017/%012d.jpg, --coco files in one folder, zipped twice:
                   `zip -r -q` (deflated: Info-ZIP stores the members it cannot shrink, so
                   this zip holds both kinds) and `zip -0 -r -q` (stored)
  ImageNet-shaped  train/nXXXXXXXX/nXXXXXXXX_I.JPEG, --imagenet-classes folders of
                   --imagenet-per-class files, as `tar cf - train | pigz -6` (`tar czf`
                   where pigz is missing)

Per archive:
  extraction       `unzip -qq` / `tar -xf` into a folder, and the SHA-256 of every file
                   there: what the mount must serve
  first listing    saved index removed, page cache dropped, a fresh XDG_CACHE_HOME;
                   `gpufsd mount --no-disk-cache ARCHIVE MNT` timed from the command's start
                   until it returns with the mount ready; then every file read through the
                   mount by --threads threads and its SHA-256 and the set of paths compared
                   with the extraction's. The index it saved (ARCHIVE.gpufs-index and its
                   .plan beside the archive) is measured; both figures also per million
                   members
  remount          unmounted, page cache dropped, mounted again with that index: the time
  HTTP             the archive alone in a folder that nginx serves on 127.0.0.1; with a
                   fresh XDG_CACHE_HOME (the index of a remote archive goes to the private
                   cache there), `gpufsd mount --no-disk-cache http://127.0.0.1:PORT/NAME`
                   timed as above, every file compared again; then its remount with the
                   cached index

Prints one table; writes results.json and the daemons' logs to --out. A file that reads
differently, a path missing or extra, or a read error makes that archive's column NO and
is listed (the first ten of each) in the output and in results.json.
"""
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from archives import index_files, remove_index, zip_version  # noqa: E402
from benchlib import (add_options, arg_parser, drop_caches, files_of, need_root,  # noqa: E402
                      nginx, save_results, unwind_on_signals, version_line, versions)
from benchmount import GPUFSD, GPUFSD_EPILOG, gpufs_mounted, is_mounted  # noqa: E402

# A JFIF APP0 segment after the SOI marker, as a camera's or libjpeg's file starts.
JPEG_HEAD = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
JPEG_END = b"\xff\xd9"
SHOWN = 10  # mismatched paths listed per kind


def jpeg_like(rng, mean_bytes, index):
    """A file's bytes: its size drawn evenly from half to 1.5x `mean_bytes`. Most are a
    JPEG header, an APP15 segment of a repeated pattern (about 1/16 of the size, so that
    deflate shrinks the file a little, as it does a real JPEG) and random bytes; every
    tenth is random bytes after the header, which deflate cannot shrink."""
    size = max(64, int(mean_bytes * (0.5 + rng.random())))
    body = size - len(JPEG_HEAD) - len(JPEG_END)
    if index % 10 == 9:
        return JPEG_HEAD + rng.randbytes(body) + JPEG_END
    pad = min(body // 16, 60000)
    segment = b"\xff\xef" + (pad + 2).to_bytes(2, "big") + (b"gpufs\x00" * (pad // 6 + 1))[:pad]
    return JPEG_HEAD + segment + rng.randbytes(body - len(segment)) + JPEG_END


def write_files(root, names, mean_bytes, seed):
    """Each of `names` (paths relative to `root`) written with jpeg_like bytes, seeded:
    the same dataset on every run. Returns the bytes written."""
    rng = random.Random(seed)
    total = 0
    made = set()
    for i, rel in enumerate(names):
        path = os.path.join(root, rel)
        folder = os.path.dirname(path)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        data = jpeg_like(rng, mean_bytes, i)
        with open(path, "wb") as f:
            f.write(data)
        total += len(data)
    return total


def coco_names(count):
    return [f"train2017/{i:012d}.jpg" for i in range(1, count + 1)]


def imagenet_names(classes, per_class):
    return [f"train/n{c:08d}/n{c:08d}_{i}.JPEG" for c in range(classes) for i in range(per_class)]


def shell(command, cwd, out):
    """`command` (bash, pipefail) run in `cwd` with $OUT the archive's path; its seconds."""
    start = time.perf_counter()
    subprocess.run(["bash", "-c", "set -eo pipefail; " + command], cwd=cwd, check=True,
                   env=dict(os.environ, OUT=out))
    return time.perf_counter() - start


def tar_gz_command():
    """(the pipeline that writes the .tar.gz of `train`, the compressor's version)."""
    if shutil.which("pigz"):
        return 'tar cf - train | pigz -6 > "$OUT"', version_line("pigz", "--version")
    return 'tar czf "$OUT" train', version_line("gzip", "--version")


def zip_members(path):
    """{"deflated": n, "stored": n} of a zip's file members (its central directory)."""
    kinds = {"deflated": 0, "stored": 0, "other": 0}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            kind = {zipfile.ZIP_DEFLATED: "deflated", zipfile.ZIP_STORED: "stored"}.get(
                info.compress_type, "other")
            kinds[kind] += 1
    return {k: v for k, v in kinds.items() if v or k != "other"}


def digests(root, paths, threads):
    """({path: SHA-256 hex}, {path: error}) of every file of `paths` (relative to `root`),
    read by `threads` threads, each taking every threads-th path; and the seconds taken."""
    sums, errors, lock = {}, {}, threading.Lock()

    def reader(chunk):
        mine, failed = {}, {}
        for rel in chunk:
            try:
                h = hashlib.sha256()
                with open(os.path.join(root, rel), "rb") as f:
                    while True:
                        block = f.read(1 << 20)
                        if not block:
                            break
                        h.update(block)
                mine[rel] = h.hexdigest()
            except OSError as e:
                failed[rel] = f"{type(e).__name__}: {e}"
        with lock:
            sums.update(mine)
            errors.update(failed)

    workers = [threading.Thread(target=reader, args=(paths[i::threads],)) for i in range(threads)]
    start = time.perf_counter()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return sums, errors, time.perf_counter() - start


def wrapper(paths):
    """The folder prefix a mount looks through, as docs/guide.md ("Tar archives") says: a
    lone top folder that holds folders (and no files beside it), again and again; a lone
    folder of files only is a class and stays. "" where there is none."""
    prefix = ""
    while True:
        below = [p[len(prefix):] for p in paths if p.startswith(prefix)]
        if any("/" not in p for p in below):
            return prefix
        folders = {p.split("/", 1)[0] for p in below}
        if len(folders) != 1:
            return prefix
        inner = prefix + folders.pop() + "/"
        if not any("/" in p[len(inner):] for p in paths if p.startswith(inner)):
            return prefix
        prefix = inner


def compare(want, got, errors):
    """How `got` ({path: sha}) differs from `want`: {"byte_exact", "missing", "extra",
    "differ", "read_errors"} (each list its first SHOWN, with a count)."""
    missing = sorted(set(want) - set(got) - set(errors))
    extra = sorted(set(got) - set(want))
    differ = sorted(p for p in set(want) & set(got) if want[p] != got[p])
    failed = sorted(errors.items())
    result = {"byte_exact": not (missing or extra or differ or failed)}
    for key, items in (("missing", missing), ("extra", extra), ("differ", differ),
                       ("read_errors", failed)):
        result[key] = {"count": len(items), "first": items[:SHOWN]}
    return result


def say_mismatch(where, check):
    for key in ("missing", "extra", "differ", "read_errors"):
        if check[key]["count"]:
            print(f"    {where}: {check[key]['count']} {key.replace('_', ' ')}, first: "
                  + ", ".join(str(x) for x in check[key]["first"]), flush=True)


class Checker:
    """The mounts of one run: `options` for every gpufsd mount, logs kept in `logs`, each
    mount with a fresh XDG_CACHE_HOME under `work` unless told to keep the last one."""

    def __init__(self, work, logs, options, threads):
        self.work, self.logs, self.options, self.threads = work, logs, options, threads
        self.serial = 0

    def fresh_cache(self):
        self.serial += 1
        cache = os.path.join(self.work, f"xdg-cache-{self.serial}")
        os.mkdir(cache)
        os.environ["XDG_CACHE_HOME"] = cache
        return cache

    def mount_and_read(self, src, log, want, served=None):
        """`src` mounted after the page cache is dropped: {"mount_s", "walk_s", "read_s",
        "files_per_s", "check"}, every file compared with `want`; with `served` (a function
        giving the origin's (requests, bytes) so far), "listing_requests" and
        "listing_bytes", what the first listing asked of it."""
        drop_caches()
        argv = [*self.options, "--log-file", os.path.join(self.logs, log)]
        before = served() if served else None
        start = time.perf_counter()
        with gpufs_mounted(src, *argv, prefix="gpufs-archive-scale-") as mnt:
            row = {"mount_s": time.perf_counter() - start}
            if served:
                after = served()
                row["listing_requests"] = after[0] - before[0]
                row["listing_bytes"] = after[1] - before[1]
            if not is_mounted(mnt):
                raise RuntimeError(f"gpufsd mount {src} returned, but {mnt} is not mounted")
            start = time.perf_counter()
            paths = files_of(mnt)
            row["walk_s"] = time.perf_counter() - start
            got, errors, row["read_s"] = digests(mnt, paths, self.threads)
        row["files_per_s"] = len(paths) / row["read_s"] if row["read_s"] else 0.0
        row["check"] = compare(want, got, errors)
        return row

    def remount(self, src, log, members):
        """`src` mounted again (page cache dropped), its saved index in place: the seconds
        until ready; raises unless it lists `members` files."""
        drop_caches()
        argv = [*self.options, "--log-file", os.path.join(self.logs, log)]
        start = time.perf_counter()
        with gpufs_mounted(src, *argv, prefix="gpufs-archive-scale-") as mnt:
            seconds = time.perf_counter() - start
            listed = sum(len(names) for _, _, names in os.walk(mnt))
        if listed != members:
            raise RuntimeError(f"the remount of {src} lists {listed} files, not {members}")
        return seconds


    def http(self, name, url, want, members, served):
        """`url` mounted with a fresh private cache, every file compared with `want`, then
        mounted again with the index it saved there: the row of mount_and_read, with
        "url", "index_files", "index_bytes" and "remount_s"."""
        cache = self.fresh_cache()
        tag = "query" if "?" in url else "plain"
        row = self.mount_and_read(url, f"{name}-http-{tag}-first.log", want, served)
        row["url"] = url
        row["index_files"] = {os.path.join(folder, n): os.path.getsize(os.path.join(folder, n))
                              for folder, _, names in os.walk(cache) for n in names
                              if ".gpufs-index" in n}
        row["index_bytes"] = sum(row["index_files"].values())
        print(f"    HTTP:  {url}: first listing {row['mount_s']:.2f} s ("
              f"{row['listing_requests']} requests, {row['listing_bytes'] / 1e6:.0f} MB), walk "
              f"{row['walk_s']:.2f} s, read {row['files_per_s']:.0f} files/s, cached index "
              f"{row['index_bytes'] / 1e6:.2f} MB ({len(row['index_files'])} files), byte-exact "
              f"{'yes' if row['check']['byte_exact'] else 'NO'}", flush=True)
        say_mismatch(f"{name} {url}", row["check"])
        row["remount_s"] = self.remount(url, f"{name}-http-{tag}-remount.log", members)
        print(f"    HTTP:  remount {row['remount_s']:.2f} s", flush=True)
        return row


def extracted(archive, tool, folder, threads):
    """The archive extracted by `tool` into `folder`: ({path: sha}, seconds to extract,
    seconds to hash); the folder is removed after."""
    os.mkdir(folder)
    argv = (["unzip", "-qq", archive, "-d", folder] if tool == "unzip"
            else ["tar", "-xf", archive, "-C", folder])
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    try:
        sums, errors, hash_s = digests(folder, files_of(folder), threads)
        if errors:
            raise RuntimeError(f"reading the extraction of {archive}: {errors}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return sums, seconds, hash_s


def failure_text(e):
    """A failure as one line: a command's argv, exit status and what it said on stderr."""
    if isinstance(e, subprocess.CalledProcessError):
        said = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        return (f"`{' '.join(str(c) for c in e.cmd)}` exited {e.returncode}: "
                + " | ".join(line for line in (said or "").strip().splitlines()))
    return f"{type(e).__name__}: {e}"


def check_archive(name, made, checker, www, origin, work):
    """One archive through every step; its row (a step that failed: its "error")."""
    path = made["path"]
    row = {"archive": name, "archive_bytes": made["bytes"], "command": made["command"]}
    if "zip_members" in made:
        row["zip_members"] = made["zip_members"]
    steps = "extraction"
    try:
        want, row["extract_s"], row["extract_hash_s"] = extracted(
            path, made["extract"], os.path.join(work, f"extract-{name}"), checker.threads)
        members = row["members"] = len(want)
        # What the mount should serve: the extraction, less a wrapper folder looked through.
        row["wrapper"] = wrapper(sorted(want))
        want = {p[len(row["wrapper"]):]: sha for p, sha in want.items()}
        print(f"  {name}: {members} members, {made['bytes'] / 1e6:.0f} MB; {made['extract']} "
              f"{row['extract_s']:.1f} s, hashed in {row['extract_hash_s']:.1f} s"
              + (f"; wrapper {row['wrapper']} looked through" if row["wrapper"] else ""),
              flush=True)

        steps = "local first listing"
        remove_index(path, checker.fresh_cache())
        row["local"] = checker.mount_and_read(path, f"{name}-local-first.log", want)
        index = {p: os.path.getsize(p) for p in index_files(path, os.environ["XDG_CACHE_HOME"])}
        row["local"]["index_files"] = index
        row["local"]["index_bytes"] = sum(index.values())
        local = row["local"]
        print(f"    local: first listing {local['mount_s']:.2f} s, walk {local['walk_s']:.2f} s, "
              f"read {local['files_per_s']:.0f} files/s, index "
              f"{local['index_bytes'] / 1e6:.2f} MB ({len(index)} files), byte-exact "
              f"{'yes' if local['check']['byte_exact'] else 'NO'}", flush=True)
        say_mismatch(f"{name} local", local["check"])

        steps = "local remount"
        row["local"]["remount_s"] = checker.remount(path, f"{name}-local-remount.log", members)
        print(f"    local: remount {row['local']['remount_s']:.2f} s", flush=True)

        steps = "HTTP first listing"
        served = os.path.join(www, os.path.basename(path))
        os.link(path, served)
        plain = f"{origin.url}/{os.path.basename(path)}"

        def served_now():
            requests, sent, _ = origin.served("/" + os.path.basename(path))
            return requests, sent
        try:
            row["http"] = checker.http(name, plain, want, members, served_now)
        except (subprocess.CalledProcessError, OSError, RuntimeError) as e:
            # Refused by URL: said plainly, and the archive measured again by a URL with a
            # query (the shape of a presigned URL), which names the object whatever its
            # name, so that its reads over HTTP are still checked.
            row["http_error"] = failure_text(e)
            print(f"    HTTP:  {plain} FAILED: {row['http_error']}", flush=True)
            steps = "HTTP first listing, by a URL with a query"
            row["http_query"] = checker.http(name, plain + "?gpufs-bench=1", want, members,
                                            served_now)
    except (subprocess.CalledProcessError, OSError, RuntimeError) as e:
        row["error"] = f"{steps}: {failure_text(e)}"
        print(f"    {name} FAILED in {steps}: {failure_text(e)}", flush=True)
    return row


def fmt(value, spec):
    """`value` formatted by `spec` ("9.2f"), or "-" as wide where it is None."""
    return format(value, spec) if value is not None else "-".rjust(int(spec.split(".")[0].rstrip("df")))


def print_table(rows):
    print(f"\n{'archive':20}{'members':>9}{'MB':>8}{'first list s':>13}{'s/M':>8}"
          f"{'index MB':>9}{'MB/M':>7}{'remount s':>10}{'HTTP first s':>13}{'s/M':>8}"
          f"{'HTTP remount s':>15}{'exact local':>12}{'exact HTTP':>16}")
    notes = []
    for r in rows:
        local = r.get("local", {})
        http = r.get("http") or r.get("http_query") or {}
        mark = "*" if "http_query" in r else ""
        members = r.get("members")
        per_m = 1e6 / members if members else None

        def exact(side):
            return "-" if "check" not in side else ("yes" if side["check"]["byte_exact"] else "NO")
        first = local.get("mount_s")
        index_mb = local["index_bytes"] / 1e6 if "index_bytes" in local else None
        exact_http = exact(http) + mark
        if "http_error" in r:
            exact_http = "refused, " + exact_http
            notes.append(f"  {r['archive']} by its plain URL FAILED: {r['http_error']}")
        print(f"{r['archive']:20}{fmt(members, '9d')}{r['archive_bytes'] / 1e6:8.0f}"
              f"{fmt(first, '13.2f')}"
              f"{fmt(first * per_m if first is not None and per_m else None, '8.1f')}"
              f"{fmt(index_mb, '9.2f')}"
              f"{fmt(index_mb * per_m if index_mb is not None and per_m else None, '7.1f')}"
              f"{fmt(local.get('remount_s'), '10.2f')}"
              f"{fmt(http.get('mount_s'), '12.2f')}{mark or ' '}"
              f"{fmt(http['mount_s'] * per_m if 'mount_s' in http and per_m else None, '8.1f')}"
              f"{fmt(http.get('remount_s'), '14.2f')}{mark or ' '}"
              f"{exact(local):>12}{exact_http:>16}")
        if "error" in r:
            notes.append(f"  {r['archive']} FAILED: {r['error']}")
    print("first list s: from `gpufsd mount` starting until it returns with the mount ready "
          "(saved index removed, page cache dropped, disk tier off); s/M and MB/M: per million "
          "members; index: ARCHIVE.gpufs-index and its .plan beside the archive; remount: with "
          "that index; HTTP: the same archive from nginx on 127.0.0.1, its index in a fresh "
          "private cache")
    if any("http_query" in r for r in rows):
        print("*: the plain URL was refused; measured by the URL with a query "
              "(?gpufs-bench=1, a presigned URL's shape)")
    for line in notes:
        print(line)


def main():
    parser = arg_parser(__doc__, GPUFSD_EPILOG)
    parser.add_argument("--coco", type=int, default=118287,
                        help="files of the COCO-shaped zip (COCO train2017: 118287)")
    parser.add_argument("--imagenet-classes", type=int, default=1000,
                        help="class folders of the ImageNet-shaped .tar.gz")
    parser.add_argument("--imagenet-per-class", type=int, default=40,
                        help="files per class folder of the .tar.gz")
    parser.add_argument("--mean-kb", type=float, default=6,
                        help="mean file size in KB (sizes spread from half to 1.5x)")
    parser.add_argument("--threads", type=int, default=4, help="reader threads through a mount")
    add_options(parser, work=("/var/tmp", "the local disk the datasets and archives go to"),
                out=("/var/tmp/gpufs-archive-scale-results", "where results.json and the logs go"))
    args = parser.parse_args()
    need_root("archive_scale", "drop_caches")
    unwind_on_signals()
    for tool in ("zip", "unzip", "tar"):
        if not shutil.which(tool):
            sys.exit(f"archive_scale: {tool} is not installed")
    if nginx.NginxOrigin.skip_reason():
        sys.exit(f"archive_scale: {nginx.NginxOrigin.skip_reason()}")
    os.makedirs(args.out, exist_ok=True)
    gz_command, gz_tool = tar_gz_command()
    mean_bytes = int(args.mean_kb * 1000)
    result = {"gpufsd": GPUFSD, "gpufs": versions("gpufs")["gpufs"], "cpus": os.cpu_count(),
              "threads": args.threads, "mean_kb": args.mean_kb, "work": args.work,
              "options": ["--no-disk-cache"], "rows": []}
    print(f"gpufs {result['gpufs']}, {GPUFSD}; {os.cpu_count()} CPUs; {args.threads} reader "
          f"threads; work folder on {args.work}", flush=True)
    work = tempfile.mkdtemp(prefix="gpufs-archive-scale-", dir=args.work)
    logs = os.path.join(work, "logs")
    os.mkdir(logs)
    try:
        archives = os.path.join(work, "archives")
        os.mkdir(archives)
        made = {}
        print("making the datasets and archives:", flush=True)
        coco = os.path.join(work, "coco")
        start = time.perf_counter()
        data = write_files(coco, coco_names(args.coco), mean_bytes, seed=1)
        print(f"  COCO-shaped: {args.coco} files, {data / 1e6:.0f} MB in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
        result["coco"] = {"files": args.coco, "bytes": data}
        for name, command in (("coco-deflated.zip", 'zip -r -q "$OUT" train2017'),
                              ("coco-stored.zip", 'zip -0 -r -q "$OUT" train2017')):
            path = os.path.join(archives, name)
            seconds = shell(command, coco, path)
            made[name] = {"path": path, "bytes": os.path.getsize(path), "make_s": seconds,
                          "command": command.replace('"$OUT"', name), "tool": zip_version(),
                          "extract": "unzip", "zip_members": zip_members(path)}
            print(f"  {name}: {made[name]['bytes'] / 1e6:.0f} MB in {seconds:.1f} s, members "
                  f"{made[name]['zip_members']}", flush=True)
        shutil.rmtree(coco)
        imagenet = os.path.join(work, "imagenet")
        start = time.perf_counter()
        count = args.imagenet_classes * args.imagenet_per_class
        data = write_files(imagenet, imagenet_names(args.imagenet_classes,
                                                    args.imagenet_per_class), mean_bytes, seed=2)
        print(f"  ImageNet-shaped: {count} files in {args.imagenet_classes} classes, "
              f"{data / 1e6:.0f} MB in {time.perf_counter() - start:.1f} s", flush=True)
        result["imagenet"] = {"files": count, "classes": args.imagenet_classes, "bytes": data}
        name = "imagenet.tar.gz"
        path = os.path.join(archives, name)
        seconds = shell(gz_command, imagenet, path)
        made[name] = {"path": path, "bytes": os.path.getsize(path), "make_s": seconds,
                      "command": gz_command.replace('"$OUT"', name), "tool": gz_tool,
                      "extract": "tar"}
        print(f"  {name}: {made[name]['bytes'] / 1e6:.0f} MB in {seconds:.1f} s "
              f"({made[name]['command']}; {gz_tool})", flush=True)
        shutil.rmtree(imagenet)
        result["archives"] = {n: {k: v for k, v in m.items() if k != "path"}
                              for n, m in made.items()}

        www = os.path.join(work, "www")  # the archives alone, hard links: nothing beside them
        os.mkdir(www)
        checker = Checker(work, logs, ["--no-disk-cache"], args.threads)
        with nginx.NginxOrigin(www) as origin:
            print(f"nginx on {origin.url} serving {www}", flush=True)
            for name, m in made.items():
                result["rows"].append(check_archive(name, m, checker, www, origin, work))
    finally:
        shutil.copytree(logs, os.path.join(args.out, "logs"), dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    print_table(result["rows"])
    save_results(args.out, result, f" and the daemons' logs in {args.out}/logs")
    failed = [r["archive"] for r in result["rows"]
              if "error" in r or "http_error" in r
              or not all(r.get(side, {}).get("check", {}).get("byte_exact")
                         for side in ("local", "http"))]
    if failed:
        print(f"NOT byte-exact or failed: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
