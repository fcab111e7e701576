#!/bin/sh
# Slurm Epilog of gpufs: unmounts what prolog.sh mounted and stops the node's peer cache,
# waiting until both daemons have exited. The peer's cache folder stays for the next job.
# Nothing to undo is fine; a mount or nginx that will not go fails (Slurm drains the node).
set -u
PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=/dev/null # the settings: gpufs-slurm.conf
. "${GPUFS_SLURM_CONF:-/etc/gpufs/slurm.conf}"
GPUFSD=${GPUFSD:-gpufsd}
run=${GPUFS_RUN_DIR:-/run/gpufs-slurm}
status=0

mounted() { awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo; }
running() { # a pid that has not exited (a zombie has)
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  case ${stat##*) } in Z* | X*) return 1 ;; esac
}

# As the mount table spells it (no stat of the mount itself: its daemon may be dead).
mnt=$(cd "$(dirname "$GPUFS_MOUNTPOINT")" 2>/dev/null && pwd -P)/$(basename "$GPUFS_MOUNTPOINT")
# gpufsd unmount returns once the daemon has exited.
if mounted "$mnt" && ! "$GPUFSD" unmount "$mnt"; then
  echo "gpufs epilog: cannot unmount $mnt" >&2
  status=1
fi

pid=$(cat "$run/nginx/nginx.pid" 2>/dev/null) || pid=''
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
fi
[ "$status" -ne 0 ] || rm -rf "$run"
exit "$status"
