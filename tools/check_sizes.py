#!/usr/bin/env python3
"""Measures the daemon's C++ as docs/style.md ("Sizes") does: lines per folder, a unit's
lines (a .cc with its .h), and each function's lines. With --check, fails when a unit passes
600 lines or a function 60; otherwise prints the figures a clean-up is judged by.

Functions are found by the shape clang-format gives them: a definition's head ends a line
with '{' at column 0 (or at a class's indent in a header) and its body closes with '}' at
the same indent. Lambdas count inside their function, which is what a reader sees."""
import argparse
import collections
import pathlib
import re
import sys

FOLDERS = ["base", "dataset", "source", "cache", "fs", "fuse", "cli", "gpu"]
UNIT_LIMIT = 600
FUNCTION_LIMIT = 60


def sources(root: pathlib.Path):
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".cc", ".h"):
                yield path


def strip(text):
    """Blanks comments, strings and chars, keeping newlines."""
    out=[];i=0;n=len(text)
    while i<n:
        c=text[i]
        if text.startswith("//",i):
            j=text.find("\n",i); j=n if j<0 else j; out.append(" "*(j-i)); i=j
        elif text.startswith("/*",i):
            j=text.find("*/",i)+2; out.append(re.sub(r"[^\n]"," ",text[i:j])); i=j
        elif c=='R' and text.startswith('R"',i) and (i==0 or not (text[i-1].isalnum() or text[i-1]=='_')):
            k=text.find("(",i); delim=")"+text[i+2:k]+'"'; j=text.find(delim,k)+len(delim)
            out.append(re.sub(r"[^\n]"," ",text[i:j])); i=j
        elif c in "\"'":
            if c=="'" and i>0 and text[i-1].isalnum() and text[i-1] not in "uUL8":  # digit separator
                out.append(" "); i+=1; continue
            j=i+1
            while j<n and text[j]!=c:
                j+=2 if text[j]=="\\" else 1
            out.append(" "*(j+1-i)); i=j+1
        else:
            out.append(c); i+=1
    return "".join(out)


def code_of(path: pathlib.Path) -> str:
    """The file's text with preprocessor lines, comments and literals blanked."""
    lines = path.read_text().splitlines()
    return strip("\n".join("" if l.lstrip().startswith("#") else l for l in lines))


def functions(path: pathlib.Path):
    """Yields (name, first line, lines) for each function defined in the file: a block whose
    head has a parameter list and that opens in a namespace or a class, not in a function."""
    text = code_of(path)
    stack, head_start, head = [], None, ""
    line = 1
    for c in text:
        if c == "\n":
            line += 1
        if c == "{":
            kind = block_kind(head, stack)
            stack.append((kind, head_start or line, head))
            head, head_start = "", None
        elif c == "}":
            kind, start, text_head = stack.pop() if stack else ("other", line, "")
            if kind == "function":
                yield name_of(text_head), start, line - start + 1
            head, head_start = "", None
        elif c == ";":
            head, head_start = "", None
        elif not c.isspace() or head:
            if head_start is None and not c.isspace():
                head_start = line
            head += c


def block_kind(head: str, stack) -> str:
    words = head.split()
    if stack and stack[-1][0] not in ("namespace", "type"):
        return "inner"
    if not words or words[0] in ("namespace", "extern"):
        return "namespace"
    if re.match(r"(template\s*<.*>\s*)?(class|struct|union|enum)\b", head.strip()):
        return "type"
    return "function" if "(" in head and "=" not in head.split("(")[0] else "other"


def name_of(head: str) -> str:
    before = re.sub(r"\s+", " ", head.split("(")[0]).strip()
    return before.split(" ")[-1] if before else "?"


def measure(root: pathlib.Path):
    folders = collections.Counter()
    units = collections.Counter()
    funcs = []
    for path in sources(root):
        rel = path.relative_to(root)
        count = len(path.read_text().splitlines())
        folders[str(rel.parent)] += count
        units[str(rel.with_suffix(""))] += count
        funcs += [(n, f"{rel}:{line}", name) for name, line, n in functions(path)]
    return folders, units, sorted(funcs, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".")
    parser.add_argument("--check", action="store_true", help="fail on a unit or function too long")
    parser.add_argument("--most", type=int, default=10, help="how many units and functions to list")
    args = parser.parse_args()
    folders, units, funcs = measure(pathlib.Path(args.root))
    if args.check:
        big = [(n, u) for u, n in units.items() if n > UNIT_LIMIT]
        long = [f for f in funcs if f[0] > FUNCTION_LIMIT]
        for n, u in sorted(big, reverse=True):
            print(f"{u}: {n} lines with its header (limit {UNIT_LIMIT})")
        for n, where, name in long:
            print(f"{where}: {name} has {n} lines (limit {FUNCTION_LIMIT})")
        print(f"check_sizes: {len(big)} unit(s) and {len(long)} function(s) over the limits")
        return 1 if big or long else 0
    print("lines per folder (.cc and .h):")
    for folder, n in sorted(folders.items()):
        print(f"  {n:6d}  {folder}/")
    print(f"  {sum(folders.values()):6d}  in all")
    print("largest units (.cc with its .h):")
    for unit, n in units.most_common(args.most):
        print(f"  {n:6d}  {unit}")
    print(f"longest functions ({sum(1 for f in funcs if f[0] > 40)} over 40 lines):")
    for n, where, name in funcs[: args.most]:
        print(f"  {n:6d}  {name}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
