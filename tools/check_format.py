#!/usr/bin/env python3
"""Refuses C++ that clang-format would change: runs `clang-format --dry-run --Werror` with
the tree's .clang-format over every .cc and .h of the tree (tools/source_tree.py says
which), lists each file it would reformat, and exits 1 if there is one.

    tools/check_format.py [ROOT]

Exits 77 (meson's "skipped") where clang-format is not installed; tools/install_deps.sh
installs Debian 12's (clang-format 14), whose output is the one the tree is kept in. Fix a
listed file with `clang-format -i FILE` (docs/style.md, "Formatting")."""
import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import source_tree  # noqa: E402

SKIP = 77  # meson's exit status for a skipped test
SUFFIXES = (".cc", ".h")


def unformatted(clang_format: str, root: pathlib.Path, path: str):
    """None where the file is formatted; otherwise what clang-format said of it."""
    run = subprocess.run([clang_format, "--dry-run", "--Werror", "--style=file", path],
                         cwd=root, capture_output=True, text=True)
    if run.returncode == 0:
        return None
    lines = run.stderr.splitlines()
    if any("-Wclang-format-violations" in line for line in lines):
        return f"{sum('-Wclang-format-violations' in l for l in lines)} place(s) to reformat"
    return "clang-format failed: " + (lines[0] if lines else f"exit status {run.returncode}")


def main(root: pathlib.Path) -> int:
    clang_format = os.environ.get("CLANG_FORMAT") or shutil.which("clang-format")
    if not clang_format:
        print("check_format: SKIP: clang-format is not installed (apt-get install "
              "clang-format, or tools/install_deps.sh); the C++ was not checked")
        return SKIP
    paths = [p for p in source_tree.files(root) if p.endswith(SUFFIXES)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        said = list(pool.map(lambda p: unformatted(clang_format, root, p), paths))
    bad = [(p, why) for p, why in zip(paths, said) if why]
    for path, why in bad:
        print(f"{path}: {why} (clang-format -i {path})")
    version = subprocess.run([clang_format, "--version"], capture_output=True, text=True)
    print(f"check_format: {len(bad)} of {len(paths)} C++ file(s) not as .clang-format has them "
          f"({version.stdout.strip() or clang_format})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
