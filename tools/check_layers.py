#!/usr/bin/env python3
"""Refuses an #include that points up a layer, up a room inside a layer, or round a cycle.

The layers, lowest first (base/: what every layer may use: errors, private files, file
I/O, xattr names); a file may include its own layer and those below it. gpu/ is a
client beside the daemon: it may use the dataset and source layers, and nothing of the
daemon's cache, core or adapter.

Inside a layer, each folder is a room, and ROOMS orders them, lowest first: a file may
include its own room and those below it. A folder of a layer that ROOMS does not name is
refused, so that a new room is placed on purpose.

Across the whole tree, a unit (a .cc with its .h) may not include, however indirectly, a
unit that includes it: a pair that needs each other is one unit, or two with a third below
them."""
import collections
import pathlib
import re
import sys

LAYERS = ["base", "dataset", "source", "cache", "fs", "fuse", "cli"]
ALLOWED = {layer: set(LAYERS[: i + 1]) for i, layer in enumerate(LAYERS)}
ALLOWED["gpu"] = {"base", "dataset", "source", "gpu"}
ALLOWED["cli"].add("gpu")
ROOMS = {
    "base": ["base"],
    "dataset": ["dataset", "dataset/format", "dataset/compressed", "dataset/open"],
    "source": ["source", "source/remote/address", "source/remote/credentials",
               "source/remote/transfer", "source/remote", "source/decode"],
    "cache": ["cache/policy", "cache/account", "cache/tier", "cache/load", "cache"],
    "fs": ["fs"],
    "fuse": ["fuse"],
    "cli": ["cli/options", "cli/stat", "cli", "cli/emulate", "cli/emulate/gpufs_emulate"],
    "gpu": ["gpu", "gpu/examples"],
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"(([a-z_]+)/[^"]+)"')


def includes(root: pathlib.Path):
    """Yields (path, line number, included path, its layer) for each project include."""
    for layer in ALLOWED:
        for path in sorted((root / layer).rglob("*")):
            if path.suffix not in (".h", ".cc"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if m and m.group(2) in ALLOWED:
                    yield path.relative_to(root), number, pathlib.PurePath(m.group(1)), layer


def room_problems(root: pathlib.Path, layer: str) -> list:
    rooms = ROOMS[layer]
    return [f"{folder.relative_to(root)}/: a room of {layer}/ that ROOMS in "
            f"tools/check_layers.py does not place; add it where it belongs"
            for folder in sorted([root / layer, *(root / layer).rglob("*")])
            if folder.is_dir() and any(folder.glob("*.[ch]*"))
            and str(folder.relative_to(root)) not in rooms]


def cycles(edges: dict) -> list:
    """The strongly connected components of more than one unit (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            unit, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[unit] = min(low[unit], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[unit])
            if low[unit] == index[unit]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == unit:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main(root: pathlib.Path) -> int:
    problems = [p for layer in ROOMS for p in room_problems(root, layer)]
    edges = collections.defaultdict(set)
    for path, number, target, layer in includes(root):
        where = f"{path}:{number}"
        to_layer = target.parts[0]
        if to_layer not in ALLOWED[layer]:
            problems.append(f"{where}: {layer}/ includes {to_layer}/, a layer above it")
        elif to_layer == layer:
            rooms, here, there = ROOMS[layer], str(path.parent), str(target.parent)
            if here in rooms and there in rooms and rooms.index(there) > rooms.index(here):
                problems.append(f"{where}: {here}/ includes {there}/, a room above it")
        unit, to_unit = str(path.with_suffix("")), str(target.with_suffix(""))
        if unit != to_unit:
            edges[unit].add(to_unit)
    for component in cycles(edges):
        problems.append(f"{' <-> '.join(component)}: these units include each other")
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} include(s) pointing up a layer or a room, or round "
          "a cycle")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
