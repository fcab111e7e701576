#!/bin/sh
# Slurm Prolog of gpufs: on each node of a job, mounts the cluster's datasets for the job,
# each from a local path (a cluster file system), a store or a web server; for a remote
# one, by default, through a peer cache per node (nginx with deploy/nginx/gpufs-peer.conf)
# with every node of the job as a peer. epilog.sh undoes it all. Settings: a dataset per
# file, /etc/gpufs/slurm.conf and /etc/gpufs/slurm.d/NAME.conf (or $GPUFS_SLURM_CONF, a
# file or a folder of them).
#   slurm.conf:  Prolog=/usr/local/share/gpufs/slurm/prolog.sh
#                Epilog=/usr/local/share/gpufs/slurm/epilog.sh
#                PrologFlags=Alloc     (every node of the job, at allocation)
# Run as root by slurmd, with SLURM_JOB_ID, SLURM_JOB_NODELIST and SLURMD_NODENAME set.
# Slurm drains a node whose prolog fails: so does a node that cannot serve the dataset.
#
# Everything is the job's: its run folder ($GPUFS_RUN_DIR/$SLURM_JOB_ID), secret, peer
# cache and mount. A second job on a shared node gets its own where the settings give it
# one (a mount point and port made from $SLURM_JOB_ID), and is refused where they do not,
# before it starts anything; a failed prolog undoes only what it started.
set -eu
# slurmd may give no PATH, or one without where gpufs is installed.
PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
case ${SLURM_JOB_ID:-} in
'' | *[!0-9]*)
  echo "gpufs prolog: SLURM_JOB_ID '${SLURM_JOB_ID:-}' is not a job id" >&2
  exit 1
  ;;
esac
here=$(dirname "$0")
# Each dataset in turn, by this script with GPUFS_DATASET_CONF set; when one fails, the
# epilog undoes those mounted before it, and the job fails.
if [ -z "${GPUFS_DATASET_CONF:-}" ]; then
  confs=$("$here/epilog.sh" --datasets) || exit 1
  for dataset_conf in $confs; do
    if ! GPUFS_DATASET_CONF=$dataset_conf "$0"; then
      "$here/epilog.sh" || true
      exit 1
    fi
  done
  exit 0
fi
conf=$GPUFS_DATASET_CONF
# shellcheck source=/dev/null # the settings: gpufs-slurm.conf
. "$conf"
SCONTROL=${SCONTROL:-scontrol}
GPUFSD=${GPUFSD:-gpufsd}
# nginx reads $NGINX itself (listening sockets handed over on an upgrade): not passed on.
nginx=${NGINX:-nginx}
unset NGINX
PEER_CONFIG=${PEER_CONFIG:-gpufs-peer-config}
runs=${GPUFS_RUN_DIR:-/run/gpufs-slurm}
# The job's run folder for this dataset: JOB for slurm.conf, JOB.NAME for slurm.d/NAME.conf.
run=$runs/$SLURM_JOB_ID$("$here/epilog.sh" --suffix "$conf")
port=${GPUFS_PEER_PORT:-3128}
cache_dir=${GPUFS_PEER_CACHE_DIR:-/var/cache/gpufs-peer}
key_file=${GPUFS_PEER_KEY_FILE:-/etc/gpufs/peer.key}
node=${SLURMD_NODENAME:-$(hostname)}
refuse() { # says why this job cannot start here; nothing was started, nothing is undone
  echo "gpufs prolog: $*" >&2
  exit 1
}
fail() { # clears what this job's prolog started (epilog.sh), says why, and fails
  [ ! -f "$run/nginx/error.log" ] || tail -n 5 "$run/nginx/error.log" >&2
  GPUFS_DATASET_CONF=$conf "$here/epilog.sh" || true
  echo "gpufs prolog: $*" >&2
  exit 1
}
# As the mount table spells it (no stat of the mount itself: its daemon may be dead).
canonical() { echo "$(cd "$(dirname "$1")" 2>/dev/null && pwd -P)/$(basename "$1")"; }
mount_id() { awk -v m="$1" '$5 == m { id = $1 } END { if (id == "") exit 1; print id }' \
  /proc/self/mountinfo; }

# The job's peer cache on this node: its secret, nginx's config, nginx, and the list of
# the job's peers.
start_peers() {
  # The peer cache forwards to the store's endpoint, or to the web server of an http(s)://
  # source.
  origin=${GPUFS_PEER_ORIGIN:-$(echo "$GPUFS_SOURCE" | sed -n 's|^\(https\{0,1\}://[^/]*\).*|\1|p')}
  [ -n "$origin" ] || fail "cannot start the peer cache: set GPUFS_PEER_ORIGIN in $conf"
  address=${GPUFS_PEER_ADDRESS:-$(getent ahosts "$node" | awk 'NR == 1 { print $1 }')}
  [ -n "$address" ] || fail "cannot resolve $node: set GPUFS_PEER_ADDRESS in $conf"
  case $address in *:*) listen="[$address]:$port" ;; *) listen="$address:$port" ;; esac

  # Every node of the job is a peer, at the name Slurm knows it by.
  printf '%s\n' "$cache_dir" >"$run/cache_dir"
  mkdir -p "$run/nginx" "$cache_dir"
  "$SCONTROL" show hostnames "$SLURM_JOB_NODELIST" >"$run/hosts" ||
    fail "cannot list the nodes of $SLURM_JOB_NODELIST"
  {
    echo "# the peer caches of job $SLURM_JOB_ID's nodes"
    sed -n "s|^\([^ ]\{1,\}\)$|http://\1:$port|p" "$run/hosts"
  } >"$run/peers"

  # The job's secret, the same on every node of the job: a hash of the job's id and the
  # site's key (the key last, so that no hash of another id follows from this one). The
  # secret and nginx's config that holds it are root's alone.
  if ! { [ -r "$key_file" ] && [ -s "$key_file" ]; }; then
    fail "cannot make the job's peer secret: no key in $key_file (openssl rand -hex 32, mode 0600, the same on every node)"
  fi
  (
    umask 077
    { printf 'gpufs peer secret of job %s\n' "$SLURM_JOB_ID" && cat "$key_file"; } |
      sha256sum | cut -d' ' -f1 >"$run/secret"
  ) || fail "cannot write the job's peer secret"
  (
    umask 077
    "$PEER_CONFIG" --main --listen "$listen" --origin "$origin" --cache-dir "$cache_dir" \
      --cache-size "${GPUFS_PEER_CACHE_SIZE:-100g}" --secret-file "$run/secret" \
      >"$run/nginx/nginx.conf"
  ) || fail "cannot write the peer cache's config"
  # nginx returns once it listens, running on in the background.
  "$nginx" -p "$run/nginx/" -c nginx.conf -e "$run/nginx/error.log" ||
    fail "cannot start the peer cache on $listen"
  # Who the epilog may signal: this nginx, by pid, start time and program. A pid alone could
  # by then name another process.
  if ! pid=$(cat "$run/nginx/nginx.pid") ||
    ! "$here/epilog.sh" --identity "$pid" >"$run/nginx.started"; then
    fail "cannot record the peer cache's process"
  fi
}

# Peers by default for a store or a web server, never for a path (every node reads the
# cluster file system itself); GPUFS_PEERS=no turns them off.
case ${GPUFS_PEERS:-auto} in
auto) case $GPUFS_SOURCE in s3://* | http://* | https://*) peers=yes ;; *) peers=no ;; esac ;;
yes | no) peers=$GPUFS_PEERS ;;
*) refuse "GPUFS_PEERS=$GPUFS_PEERS in $conf: use yes, no or auto" ;;
esac

# Another job's mount point or peer cache folder is left alone: this job is refused.
mnt=$(canonical "$GPUFS_MOUNTPOINT")
if mount_id "$mnt" >/dev/null; then
  refuse "cannot mount at $GPUFS_MOUNTPOINT: something is mounted there already (another job's dataset?); on nodes shared by jobs, give each its own, e.g. GPUFS_MOUNTPOINT=/mnt/imagenet-\$SLURM_JOB_ID, in $conf"
fi
if [ "$peers" = yes ]; then
  for other in "$runs"/*/cache_dir; do
    if [ -f "$other" ] && [ "$(cat "$other")" = "$cache_dir" ]; then
      refuse "cannot start the peer cache: job $(basename "$(dirname "$other")") on this node uses $cache_dir; on nodes shared by jobs, give each its own GPUFS_PEER_CACHE_DIR and GPUFS_PEER_PORT in $conf"
    fi
  done
fi
mkdir -p "$runs"
mkdir -m 0700 "$run" 2>/dev/null || refuse "cannot start job $SLURM_JOB_ID: $run exists (its prolog ran already?)"

mkdir -p "$GPUFS_MOUNTPOINT"
set --
if [ "$peers" = yes ]; then
  start_peers
  set -- --peers-file "$run/peers" --peer-secret-file "$run/secret"
fi

# shellcheck disable=SC2086 # GPUFS_MOUNT_OPTIONS is a list of options
if ! "$GPUFSD" mount "$@" -o allow_other ${GPUFS_MOUNT_OPTIONS:-} \
  "$GPUFS_SOURCE" "$GPUFS_MOUNTPOINT"; then
  fail "cannot mount $GPUFS_SOURCE at $GPUFS_MOUNTPOINT"
fi
# What the epilog may unmount: this mount, by its id in the mount table and its place.
id=$(mount_id "$mnt") || fail "cannot find $mnt in the mount table after mounting it"
printf '%s %s\n' "$id" "$mnt" >"$run/mount"
