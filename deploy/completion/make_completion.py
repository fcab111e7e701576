#!/usr/bin/env python3
"""Writes the bash completion of gpufsd and gpufs-stat from the tools' own descriptions of
their options (`gpufsd options --json` for mount, --help for the rest), so that it cannot
drift from them.

  make_completion.py --gpufsd PATH --gpufs-stat PATH OUTPUT

Installed as bash-completion's completions/gpufsd, with gpufs-stat a link to it.

Only words this script writes (commands, option names, choices and -o keys) go through
`compgen -W`, which expands what it is given. Mount points are data: another user may have
mounted at a folder named `d$(cmd)`. They are read from the mount table, compared with
what was typed in bash itself, and offered quoted, never expanded.
"""
import argparse
import json
import re
import subprocess
import sys

COMMANDS = ["mount", "unmount", "pack", "index", "verify", "options", "metrics"]
# --name VALUE in CLI11's help: the value names choices as {a,b}, a path as PATH or FILE.
OPTION = re.compile(r"^  (?:(-\w),)?(--[\w-]+)(?: (\S+))?")
# What a word given to `compgen -W` may hold: nothing the shell would expand or split.
PLAIN_WORD = re.compile(r"^[A-Za-z0-9_.,=+-]+$")

# The mount points, read as data (see the docstring).
MOUNTS = r'''# A field of the mount table with its \NNN octal escapes decoded (the kernel writes a
# space as \040, a backslash as \134), into REPLY. Nothing else in it is interpreted: not
# printf %b, which reads other escapes too, and "a\0407" (the table's "a 7") as "a" and
# a bell.
_gpufs_unescape() {
  local rest=$1 char escape='\\([0-7]{3})'
  REPLY=""
  while [[ $rest =~ $escape ]]; do
    REPLY+=${rest%%"${BASH_REMATCH[0]}"*}
    # shellcheck disable=SC2059 # the format is a backslash and three octal digits
    printf -v char "\\${BASH_REMATCH[1]}"
    REPLY+=$char
    rest=${rest#*"${BASH_REMATCH[0]}"}
  done
  REPLY+=$rest
}

# Adds to COMPREPLY the mount points of gpufs mounts that start with $cur, as typed or as
# printf %q quotes them. $1 is how each is added: quoted (printf %q), for a completion that
# inserts words as they are; or literal, for one with -o filenames, where readline quotes
# what it inserts. A mount point is compared and stored, never expanded or evaluated.
_gpufs_complete_mounts() {
  local IFS=$' \t\n' target type quoted REPLY
  while read -r _ target type _; do
    [[ $type == fuse.gpufs ]] || continue
    _gpufs_unescape "$target"
    printf -v quoted %q "$REPLY"
    [[ $REPLY == "$cur"* || $quoted == "$cur"* ]] || continue
    if [[ $1 == quoted ]]; then
      COMPREPLY+=("$quoted")
    else
      COMPREPLY+=("$REPLY")
    fi
  done </proc/mounts
}
'''


def help_options(argv):
    """[(names, value)] of the options `argv --help` lists."""
    text = subprocess.run(argv + ["--help"], check=True, capture_output=True, text=True).stdout
    found = []
    for line in text.splitlines():
        m = OPTION.match(line)
        if m:
            names = [n for n in (m[1], m[2]) if n]
            found.append((names, (m[3] or "").split("=")[0]))
    return found


def mount_options(gpufsd):
    groups = json.loads(subprocess.run([gpufsd, "options", "--json"], check=True,
                                       capture_output=True, text=True).stdout)
    found, keys = [], []
    for g in groups:
        for o in g["options"]:
            names = [n for n in (o["short"], o["name"]) if n]
            value = "PATH" if o["path"] else ("{" + ",".join(o["choices"]) + "}"
                                              if o["choices"] else o["value"])
            found.append((names, value))
            if o["fstab"]:
                keys.append(o["fstab"].split("=")[0] + ("=" if "=" in o["fstab"] else ""))
    found.append((["-o"], "OPTIONS"))
    return found, keys


def plain(words):
    """`words` as one `compgen -W` list; refuses a word the shell would expand or split
    (the option table is this project's, so one would be a mistake made here)."""
    words = list(words)
    for word in words:
        if not PLAIN_WORD.match(word):
            sys.exit(f"make_completion.py: cannot offer {word!r}: compgen -W would expand it")
    return " ".join(words)


def case_arms(command, options):
    """The `case` arms that complete an option's value: its choices, or a path."""
    arms = []
    for names, value in options:
        pattern = "|".join(f"{command}:{n}" for n in names)
        if value.startswith("{"):
            words = plain(value.strip("{}").split(","))
            arms.append(f'    {pattern}) COMPREPLY=($(compgen -W "{words}" -- "$cur")); return ;;')
        elif value in ("PATH", "FILE", "DIR", "FILE.png"):
            arms.append(f"    {pattern}) _filedir; return ;;")
        elif value:
            arms.append(f"    {pattern}) return ;;  # {value}: nothing to offer")
    return arms


def script(gpufsd, stat):
    per_command, arms = {}, []
    mount, keys = mount_options(gpufsd)
    for command in COMMANDS:
        options = mount if command == "mount" else help_options([gpufsd, command])
        per_command[command] = plain(n for names, _ in options for n in names)
        arms += case_arms(command, options)
    stat_options = help_options([stat])
    arms += case_arms("stat", stat_options)
    lists = "\n".join(f'  [{c}]="{o}"' for c, o in per_command.items())
    commands = plain(COMMANDS)
    return f'''# bash completion of gpufsd and gpufs-stat, made by deploy/completion/make_completion.py
# from the tools' own option tables: do not edit.

{MOUNTS}
_gpufsd() {{
  local cur prev words cword
  # -o's list is one word, '=' and all (cache_size=1GiB,pol<TAB>).
  _init_completion -n = || return
  declare -A options=(
{lists}
  )
  local command="" i
  for ((i = 1; i < cword; i++)); do
    if [[ " {commands} " == *" ${{words[i]}} "* ]]; then
      command=${{words[i]}}
      break
    fi
  done
  if [[ -z $command ]]; then
    COMPREPLY=($(compgen -W "{commands} --help --version" -- "$cur"))
    return
  fi
  if [[ $command:$prev == mount:-o ]]; then  # KEY[=VALUE],... : the item after the last comma
    local head=""
    [[ $cur == *,* ]] && head="${{cur%,*}},"
    # readline replaces only what follows the last '=' it sees (a word break): so do the replies.
    [[ $head == *=* ]] && head=${{head##*=}}
    COMPREPLY=($(compgen -P "$head" -W "{plain(keys + ["allow_other"])}" -- "${{cur##*,}}"))
    compopt -o nospace 2>/dev/null  # outside a completion (a test): nothing to set
    return
  fi
  case $command:$prev in
{chr(10).join(arms)}
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "${{options[$command]}}" -- "$cur"))
  elif [[ $command == unmount ]]; then
    # Quoted here rather than by readline (-o filenames), which would stat each one: the
    # stat of a mount whose daemon is stopped never returns.
    _gpufs_complete_mounts quoted
  elif [[ $command != options ]]; then
    _filedir
  fi
}}
complete -F _gpufsd gpufsd

_gpufs_stat() {{
  local cur prev words cword
  _init_completion || return
  local command=stat
  case $command:$prev in
{chr(10).join(a for a in arms if a.startswith("    stat:"))}
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "{plain(n for names, _ in stat_options for n in names)}" -- "$cur"))
  else
    # Files and folders, and the mount points, which readline quotes as it quotes files.
    _filedir
    _gpufs_complete_mounts literal
    compopt -o filenames 2>/dev/null  # outside a completion (a test): nothing to set
  fi
}}
complete -F _gpufs_stat gpufs-stat
'''


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpufsd", required=True)
    parser.add_argument("--gpufs-stat", required=True)
    parser.add_argument("output")
    args = parser.parse_args()
    with open(args.output, "w") as f:
        f.write(script(args.gpufsd, args.gpufs_stat))


if __name__ == "__main__":
    main()
