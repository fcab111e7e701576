#!/usr/bin/env python3
"""Writes a man page from its template (docs/man/NAME.SECTION.in) and the tools' own
descriptions of their options, so that the pages cannot drift from the programs:

  @VERSION@                the version (meson.build's)
  @MOUNT_OPTIONS@          gpufsd mount's options, by group, from `gpufsd options --json`
  @HELP program args...@   the options a program's --help lists (CLI11's or argparse's)

  make_man.py --version V --gpufsd PATH [--tool NAME=PATH]... TEMPLATE OUTPUT

Programs named in @HELP@ are looked up in the --tool list (gpufsd is always there).
"""
import argparse
import json
import re
import subprocess
import sys


def roff(text):
    """Plain text as roff: backslashes and leading dots or quotes escaped, dashes as \\-."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"^([.'])", r"\\&\1", text, flags=re.M)


def sentence(text):
    """`text` ending in a full stop, so that what follows reads as another sentence."""
    text = text.strip()
    return text if not text or text[-1] in ".!?" else text + "."


def item(flags, value, text):
    head = ", ".join(f"\\fB{roff(f)}\\fR" for f in flags)
    if value:
        head += f" \\fI{roff(value)}\\fR"
    return f".TP\n{head}\n{roff(text)}\n"


def mount_options(gpufsd):
    groups = json.loads(subprocess.run([gpufsd, "options", "--json"], check=True,
                                       capture_output=True, text=True).stdout)
    out = []
    for g in groups:
        out.append(f".SS {roff(g['group'])}\n")
        for o in g["options"]:
            text = sentence(o["help"])
            text += f" In fstab and -o: {o['fstab']}." if o["fstab"] else \
                " On the command line only."
            if o["default"]:
                text += f" Default: {o['default']}."
            flags = [f for f in (o["short"], o["name"]) if f]
            out.append(item(flags, o["value"], text))
    return "".join(out)


# An option's first line in CLI11's or argparse's help: two spaces, then its flags, then
# (after two spaces or more) the start of its description; later lines indented further.
OPTION = re.compile(r"^  (-[^ ].*?)(?:  +(\S.*))?$")
MORE = re.compile(r"^ {4,}(\S.*)$")


def help_options(argv):
    text = subprocess.run(argv + ["--help"], check=True, capture_output=True,
                          text=True).stdout
    options, current, section = [], None, None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.rstrip(":").lower()
            current = None
            continue
        if section not in ("options", "optional arguments"):
            continue
        m = OPTION.match(line)
        if m:
            spec, text = m[1].strip(), m[2] or ""
            # CLI11 leaves one space where the flags fill its 30 columns.
            if not text and len(line) > 31 and line[29] == " " and line[30] != " ":
                spec, text = line[:30].strip(), line[30:].strip()
            current = [spec, text]
            options.append(current)
        elif current and MORE.match(line):
            current[1] = (current[1] + " " + MORE.match(line)[1]).strip()
    out = []
    for spec, text in options:
        # "-h,--help", "--seed N=0", "--transform {raw,decode,train}", "-o OPTIONS ..."
        flags, _, value = spec.replace(", ", ",").partition(" ")
        value, _, default = value.partition("=")
        names = [f.strip() for f in flags.split(",")]
        text = sentence(text)
        if default:
            text += f" Default: {default}."
        out.append(item(names, value.replace(" ...", ""), text))
    return "".join(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", required=True)
    parser.add_argument("--gpufsd", required=True)
    parser.add_argument("--tool", action="append", default=[])
    parser.add_argument("template")
    parser.add_argument("output")
    args = parser.parse_args()
    tools = dict(t.split("=", 1) for t in args.tool)
    tools["gpufsd"] = args.gpufsd
    with open(args.template) as f:
        page = f.read()
    page = page.replace("@VERSION@", args.version)
    if "@MOUNT_OPTIONS@" in page:
        page = page.replace("@MOUNT_OPTIONS@\n", mount_options(args.gpufsd))
    for m in re.finditer(r"@HELP ([^@]+)@\n", page):
        program, *rest = m[1].split()
        page = page.replace(m[0], help_options([tools[program], *rest]))
    if "@" in re.sub(r"\\\(at|\S+@\S+\.\S+", "", page):
        sys.exit(f"make_man: a placeholder is left in {args.template}")
    with open(args.output, "w") as f:
        f.write(page)


if __name__ == "__main__":
    main()
