#!/bin/sh
# Slurm Epilog of gpufs: unmounts what prolog.sh mounted for this job ($SLURM_JOB_ID), each
# dataset in turn, and stops the job's peer caches, waiting until the daemons have exited.
# The peer's cache folder stays for the next job. Nothing to undo is fine; a mount still in
# use is forced (`gpufsd unmount --force`: its readers get errors, its daemon exits), so
# that no user can make the epilog fail; a mount or nginx that will not go even so fails
# (Slurm drains the node). Only this job's run folder is read or removed:
# another job's mount, peer cache and secret on a shared node are left alone.
# The mount is unmounted only while the mount table still shows it (same id, same place,
# recorded by the prolog in `mount`), and the peer cache is signalled only while its pid
# still names the process the prolog started (same start time and program, recorded by
# `epilog.sh --identity PID` in nginx.started): a pid that has since been reused names
# someone else's process.
set -u
PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

identity() { # PID: "PID START-TIME PROGRAM" (field 22 of /proc/PID/stat, /proc/PID/exe)
  id_pid=$1
  id_stat=$(cat "/proc/$id_pid/stat" 2>/dev/null) &&
    id_exe=$(readlink "/proc/$id_pid/exe" 2>/dev/null) || return 1
  # The fields after the command's name (which may hold blanks), from field 3 on.
  # shellcheck disable=SC2086 # split on blanks on purpose
  set -- ${id_stat##*) }
  [ $# -ge 20 ] || return 1
  shift 19
  printf '%s %s %s\n' "$id_pid" "$1" "$id_exe"
}
main_conf=${GPUFS_SLURM_CONF:-/etc/gpufs/slurm.conf}
datasets() { # the settings file of each dataset, one a line
  if [ -d "$main_conf" ]; then
    set -- "$main_conf"/*.conf
  else
    set -- "$main_conf" "${main_conf%.conf}.d"/*.conf
  fi
  found=''
  for f in "$@"; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .conf)
    case $name in *[!A-Za-z0-9_-]*)
      echo "gpufs: cannot use $f: name a dataset's settings NAME.conf, NAME of letters, digits, - and _" >&2
      return 1
      ;;
    esac
    printf '%s\n' "$f"
    found=1
  done
  [ -n "$found" ] || { echo "gpufs: no dataset settings in $main_conf (nor ${main_conf%.conf}.d/*.conf)" >&2; return 1; }
}
case ${1:-} in
--identity)
  identity "${2:?usage: epilog.sh --identity PID}"
  exit
  ;;
--datasets)
  datasets
  exit
  ;;
--suffix) # CONF: its run folder's suffix: none for the main settings file, else .NAME
  [ "$2" = "$main_conf" ] || printf '.%s\n' "$(basename "$2" .conf)"
  exit
  ;;
esac
case ${SLURM_JOB_ID:-} in
'' | *[!0-9]*)
  echo "gpufs epilog: SLURM_JOB_ID '${SLURM_JOB_ID:-}' is not a job id" >&2
  exit 1
  ;;
esac
# Each dataset in turn, by this script with GPUFS_DATASET_CONF set; all are tried.
if [ -z "${GPUFS_DATASET_CONF:-}" ]; then
  confs=$(datasets) || exit 1
  status=0
  for dataset_conf in $confs; do
    GPUFS_DATASET_CONF=$dataset_conf "$0" || status=1
  done
  exit "$status"
fi
conf=$GPUFS_DATASET_CONF
# shellcheck source=/dev/null # the settings: gpufs-slurm.conf
. "$conf"
GPUFSD=${GPUFSD:-gpufsd}
run=${GPUFS_RUN_DIR:-/run/gpufs-slurm}/$SLURM_JOB_ID$("$0" --suffix "$conf")
status=0

started='' # what the prolog recorded of the nginx it started: "PID START-TIME PROGRAM"
running() { # the process the prolog started, still there (a zombie has exited)
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  case ${stat##*) } in Z* | X*) return 1 ;; esac
  [ -n "$started" ] && [ "$(identity "$1")" = "$started" ]
}

# gpufsd unmount returns once the daemon has exited. A mount someone still uses (a shell
# of another user sitting in it: the mount is allow_other) would otherwise make the epilog
# fail and drain the node: the job is over, so its mount is forced, its connection cut
# (whoever still holds it gets errors) and its daemon gone all the same.
mounted=$(cat "$run/mount" 2>/dev/null) || mounted=''
mnt=${mounted#* }
if [ -n "$mounted" ] &&
  awk -v id="${mounted%% *}" -v m="$mnt" '$1 == id && $5 == m { found = 1 } END { exit !found }' \
    /proc/self/mountinfo && ! "$GPUFSD" unmount "$mnt"; then
  echo "gpufs epilog: $mnt is still in use: forcing it" >&2
  if ! "$GPUFSD" unmount --force "$mnt"; then
    echo "gpufs epilog: cannot unmount $mnt" >&2
    status=1
  fi
fi
# The mount point the prolog made for the job (an empty folder once unmounted).
if [ -f "$run/made_mountpoint" ] && [ -n "${GPUFS_MOUNTPOINT:-}" ] &&
  ! awk -v m="$mnt" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo; then
  rmdir "$GPUFS_MOUNTPOINT" 2>/dev/null || true
fi

started=$(cat "$run/nginx.started" 2>/dev/null) || started=''
pid=${started%% *}
if [ -n "$pid" ] && running "$pid"; then
  kill -TERM "$pid"
  tries=0
  while running "$pid" && [ "$tries" -lt 100 ]; do
    sleep 0.1
    tries=$((tries + 1))
  done
  if running "$pid"; then
    echo "gpufs epilog: the peer cache (nginx $pid) did not stop in 10 s; killing it" >&2
    kill -KILL "$pid"
    status=1
  fi
elif [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
  echo "gpufs epilog: pid $pid is no longer the peer cache the prolog started; left alone" >&2
fi
[ "$status" -ne 0 ] || rm -rf "$run"
exit "$status"
