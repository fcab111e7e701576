#!/usr/bin/env python3
"""Writes the user guide's tables that gpufsd makes from its tables of names (docs/guide.md):
mount's options (`gpufsd options --markdown`) and the metrics' series (`gpufsd metrics`);
with --check, only says whether they are up to date.

  tools/doc_options.py [--check] [GPUFSD]    (GPUFSD: build/cli/gpufsd by default)
"""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The command whose output stands between the markers `<!-- gpufsd ARGS: begin/end -->`.
TABLES = [["options", "--markdown"], ["metrics"]]


def main(argv):
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    gpufsd = rest[0] if rest else str(ROOT / "build" / "cli" / "gpufsd")
    guide = ROOT / "docs" / "guide.md"
    text = guide.read_text()
    for args in TABLES:
        table = subprocess.run([gpufsd, *args], check=True, capture_output=True,
                               text=True).stdout
        begin = f"<!-- gpufsd {' '.join(args)}: begin -->\n"
        end = f"<!-- gpufsd {' '.join(args)}: end -->\n"
        head, found = text.split(begin)[0], text.split(begin)[1].split(end)[0]
        if check and found != table:
            print(f"docs/guide.md's table differs from `gpufsd {' '.join(args)}`; run "
                  "tools/doc_options.py", file=sys.stderr)
            return 1
        text = head + begin + table + end + text.split(end, 1)[1]
    if not check:
        guide.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
