#!/usr/bin/env python3
"""Lints the tree's Python with pyflakes: every *.py of the tree (tools/source_tree.py says
which) and every other file that a python shebang opens (gpufs-emulate's script). Lists
what pyflakes finds (unused imports and variables, names never defined, f-strings without
a placeholder, redefinitions) and exits 1 if it finds anything.

    tools/check_python.py [ROOT]

Exits 77 (meson's "skipped") where pyflakes is not installed (Debian's pyflakes3;
tools/install_deps.sh installs it). pyflakes reads no `# noqa`: a finding is fixed, not
silenced (docs/style.md, "Formatting")."""
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import source_tree  # noqa: E402

SKIP = 77  # meson's exit status for a skipped test


def is_python(root: pathlib.Path, path: str) -> bool:
    if path.endswith(".py"):
        return True
    try:
        with open(root / path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def main(root: pathlib.Path) -> int:
    pyflakes = shutil.which("pyflakes3") or shutil.which("pyflakes")
    if not pyflakes:
        print("check_python: SKIP: pyflakes is not installed (apt-get install pyflakes3, or "
              "tools/install_deps.sh); the Python was not linted")
        return SKIP
    paths = [p for p in source_tree.files(root) if is_python(root, p)]
    run = subprocess.run([pyflakes, *paths], cwd=root, capture_output=True, text=True)
    said = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    for line in said:
        print(line)
    found = [line for line in said if re.match(r"[^:\s][^:]*:\d+:", line)]
    if run.returncode not in (0, 1) or (run.returncode == 1 and not found):
        print(f"check_python: {pyflakes} failed with exit status {run.returncode}")
        return 1
    per_folder = collections.Counter(str(pathlib.PurePath(line.split(":", 1)[0]).parent)
                                     for line in found)
    where = ", ".join(f"{n} in {folder}/" for folder, n in sorted(per_folder.items()))
    print(f"check_python: {len(found)} finding(s) in {len(paths)} Python file(s)"
          + (f": {where}" if where else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
