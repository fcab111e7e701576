#!/usr/bin/env python3
"""Writes the user guide's table of gpufsd mount's options (docs/guide.md) from `gpufsd
options --markdown`, the one table every option is declared in; with --check, only says
whether it is up to date.

  tools/doc_options.py [--check] [GPUFSD]    (GPUFSD: build/cli/gpufsd by default)
"""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- gpufsd options --markdown: begin -->\n"
END = "<!-- gpufsd options --markdown: end -->\n"


def main(argv):
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    gpufsd = rest[0] if rest else str(ROOT / "build" / "cli" / "gpufsd")
    table = subprocess.run([gpufsd, "options", "--markdown"], check=True, capture_output=True,
                           text=True).stdout
    readme = ROOT / "docs" / "guide.md"
    text = readme.read_text()
    head, found = text.split(BEGIN)[0], text.split(BEGIN)[1].split(END)[0]
    if check:
        if found == table:
            return 0
        print("docs/guide.md's option table differs from `gpufsd options --markdown`; run "
              "tools/doc_options.py", file=sys.stderr)
        return 1
    readme.write_text(head + BEGIN + table + END + text.split(END, 1)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
