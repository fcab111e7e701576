#!/usr/bin/env python3
"""Refuses an #include that points up a layer. The layers, lowest first; a file may
include its own layer and those below it. gpu/ is a client beside the daemon: it may use
the dataset and source layers, and nothing of the daemon's cache, core or adapter."""
import pathlib
import re
import sys

LAYERS = ["dataset", "source", "cache", "fs", "fuse", "cli"]
ALLOWED = {layer: set(LAYERS[: i + 1]) for i, layer in enumerate(LAYERS)}
ALLOWED["gpu"] = {"dataset", "source", "gpu"}
ALLOWED["cli"].add("gpu")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def main(root: pathlib.Path) -> int:
    problems = []
    for layer, allowed in ALLOWED.items():
        for path in sorted((root / layer).rglob("*")):
            if path.suffix not in (".h", ".cc"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if m and m.group(1) in ALLOWED and m.group(1) not in allowed:
                    problems.append(f"{path.relative_to(root)}:{number}: {layer}/ includes "
                                    f"{m.group(1)}/, a layer above it")
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} include(s) pointing up a layer")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
