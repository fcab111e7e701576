"""The files of the source tree that the checks of tools/check_format.py and
tools/check_python.py read.

In a git checkout: what git tracks, and new files it does not ignore (the copy
tools/build_deb.sh packages). Elsewhere (a packaged source tree, an unpacked tarball, or a
copy inside another checkout, where git would answer for the outer tree): every file under
the root, less what a build writes there: build folders (build*, debhelper's obj-*, any
folder meson configured), debhelper's staging under debian/, caches and hidden folders."""
import os
import pathlib
import subprocess


def _git_files(root: pathlib.Path):
    """The paths git lists for the tree at root, or None where root is not a checkout's top."""
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True)
    except OSError:
        return None
    if top.returncode != 0 or pathlib.Path(top.stdout.strip()).resolve() != root.resolve():
        return None
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True)
    if listed.returncode != 0:
        return None
    return sorted({p for p in listed.stdout.decode().split("\0") if p})


def _is_build_folder(folder: pathlib.Path, root: pathlib.Path) -> bool:
    name = folder.name
    return (name.startswith((".", "build", "obj-")) or name == "__pycache__"
            or (folder / "meson-private").is_dir()
            or folder.parent == root / "debian")


def _walked_files(root: pathlib.Path):
    found = []
    for here, folders, files in os.walk(root):
        base = pathlib.Path(here)
        folders[:] = sorted(f for f in folders if not _is_build_folder(base / f, root))
        found += [str((base / f).relative_to(root)) for f in files]
    return sorted(found)


def files(root: pathlib.Path):
    """Every source file of the tree, as paths relative to root, regular files only."""
    listed = _git_files(root)
    if listed is None:
        listed = _walked_files(root)
    return [p for p in listed if (root / p).is_file() and not (root / p).is_symlink()]
