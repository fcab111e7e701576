#!/usr/bin/env python3
"""Writes the bash completion of gpufsd and gpufs-stat from the tools' own descriptions of
their options (`gpufsd options --json` for mount, --help for the rest), so that it cannot
drift from them.

  make_completion.py --gpufsd PATH --gpufs-stat PATH OUTPUT

Installed as bash-completion's completions/gpufsd, with gpufs-stat a link to it.
"""
import argparse
import json
import re
import subprocess

COMMANDS = ["mount", "unmount", "pack", "index", "verify", "options", "metrics"]
# --name VALUE in CLI11's help: the value names choices as {a,b}, a path as PATH or FILE.
OPTION = re.compile(r"^  (?:(-\w),)?(--[\w-]+)(?: (\S+))?")


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


def case_arms(command, options):
    """The `case` arms that complete an option's value: its choices, or a path."""
    arms = []
    for names, value in options:
        pattern = "|".join(f"{command}:{n}" for n in names)
        if value.startswith("{"):
            words = " ".join(value.strip("{}").split(","))
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
        per_command[command] = " ".join(n for names, _ in options for n in names)
        arms += case_arms(command, options)
    stat_options = help_options([stat])
    arms += case_arms("stat", stat_options)
    lists = "\n".join(f'  [{c}]="{o}"' for c, o in per_command.items())
    return f'''# bash completion of gpufsd and gpufs-stat, made by deploy/completion/make_completion.py
# from the tools' own option tables: do not edit.

# The mount points of gpufs mounts, for unmount and gpufs-stat.
_gpufs_mounts() {{
  local source target type rest
  while read -r source target type rest; do
    [[ $type == fuse.gpufs ]] && printf '%b\\n' "$target"
  done </proc/mounts
}}

_gpufsd() {{
  local cur prev words cword
  _init_completion || return
  declare -A options=(
{lists}
  )
  local command="" i
  for ((i = 1; i < cword; i++)); do
    if [[ " {' '.join(COMMANDS)} " == *" ${{words[i]}} "* ]]; then
      command=${{words[i]}}
      break
    fi
  done
  if [[ -z $command ]]; then
    COMPREPLY=($(compgen -W "{' '.join(COMMANDS)} --help --version" -- "$cur"))
    return
  fi
  if [[ $command:$prev == mount:-o ]]; then  # KEY[=VALUE],... : the item after the last comma
    local head=""
    [[ $cur == *,* ]] && head="${{cur%,*}},"
    COMPREPLY=($(compgen -P "$head" -W "{' '.join(keys)} allow_other" -- "${{cur##*,}}"))
    compopt -o nospace 2>/dev/null  # outside a completion (a test): nothing to set
    return
  fi
  case $command:$prev in
{chr(10).join(arms)}
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "${{options[$command]}}" -- "$cur"))
  elif [[ $command == unmount ]]; then
    local IFS=$'\\n'
    COMPREPLY=($(compgen -W "$(_gpufs_mounts)" -- "$cur"))
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
    COMPREPLY=($(compgen -W "{' '.join(n for names, _ in stat_options for n in names)}" -- "$cur"))
  else
    _filedir
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
