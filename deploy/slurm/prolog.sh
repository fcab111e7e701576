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
# cache and mount. A failed prolog undoes only what it started.
#
# Since a prolog that exits non-zero drains the node for every job on it, nothing another
# user can do makes it fail: the peer cache listens on a privileged port (by default one
# per job, 700 + SLURM_JOB_ID % 100), which no user's process can take first; a job that
# finds its mount point held (by another job, with a mount point shared by the settings)
# mounts nothing and says so; a job that cannot start its peer cache on this node (its
# folder or port in use) mounts without one here, its gpufsd reading through the job's
# other peers and the store. Only what the site must fix (no key, no origin, a dataset
# that cannot be mounted) fails the prolog.
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
port=${GPUFS_PEER_PORT:-$((700 + SLURM_JOB_ID % 100))}
cache_dir=${GPUFS_PEER_CACHE_DIR:-/var/cache/gpufs-peer}
key_file=${GPUFS_PEER_KEY_FILE:-/etc/gpufs/peer.key}
node=${SLURMD_NODENAME:-$(hostname)}
refuse() { # says why this job cannot start here; nothing was started, nothing is undone
  echo "gpufs prolog: $*" >&2
  exit 1
}
skip() { # says why this job mounts nothing here, and lets it run: a failure would drain the node
  echo "gpufs prolog: $*" >&2
  exit 0
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

# The job's peers and secret, then its peer cache on this node. The peers file and secret
# are written whether or not this node's cache starts: the job's gpufsd uses the others.
start_peers() {
  # The peer cache forwards to the store's endpoint, or to the web server of an http(s)://
  # source.
  origin=${GPUFS_PEER_ORIGIN:-$(echo "$GPUFS_SOURCE" | sed -n 's|^\(https\{0,1\}://[^/]*\).*|\1|p')}
  [ -n "$origin" ] || fail "cannot start the peer cache: set GPUFS_PEER_ORIGIN in $conf"
  address=${GPUFS_PEER_ADDRESS:-$(getent ahosts "$node" | awk 'NR == 1 { print $1 }')}
  [ -n "$address" ] || fail "cannot resolve $node: set GPUFS_PEER_ADDRESS in $conf"
  case $address in *:*) listen="[$address]:$port" ;; *) listen="$address:$port" ;; esac

  # Every node of the job is a peer, at the name Slurm knows it by.
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
  start_peer_cache
}

# This node's nginx for the job. What another job or user holds (the cache folder, the
# port) costs the job its cache on this node, never the node.
start_peer_cache() {
  for other in "$runs"/*/cache_dir; do
    if [ -f "$other" ] && [ "$(cat "$other")" = "$cache_dir" ]; then
      without_cache "job $(basename "$(dirname "$other")") uses $cache_dir"
      return
    fi
  done
  unprivileged=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start 2>/dev/null || echo 1024)
  if [ "$port" -ge "$unprivileged" ]; then
    echo "gpufs prolog: warning: GPUFS_PEER_PORT=$port is not a privileged port (below $unprivileged): any user on $node may take it first" >&2
  fi
  printf '%s\n' "$cache_dir" >"$run/cache_dir"
  mkdir -p "$run/nginx" "$cache_dir"
  (
    umask 077
    "$PEER_CONFIG" --main --listen "$listen" --origin "$origin" --cache-dir "$cache_dir" \
      --cache-size "${GPUFS_PEER_CACHE_SIZE:-100g}" --secret-file "$run/secret" \
      >"$run/nginx/nginx.conf"
  ) || fail "cannot write the peer cache's config"
  # nginx returns once it listens, running on in the background (without the prolog's lock).
  if ! "$nginx" -p "$run/nginx/" -c nginx.conf -e "$run/nginx/error.log" 9>&-; then
    why=$(tail -n 1 "$run/nginx/error.log" 2>/dev/null)
    rm -rf "$run/nginx" "$run/cache_dir"
    without_cache "nginx cannot listen on $listen${why:+ ($why)}"
    return
  fi
  # Who the epilog may signal: this nginx, by pid, start time and program. A pid alone could
  # by then name another process.
  if ! pid=$(cat "$run/nginx/nginx.pid") ||
    ! "$here/epilog.sh" --identity "$pid" >"$run/nginx.started"; then
    fail "cannot record the peer cache's process"
  fi
}
without_cache() {
  echo "gpufs prolog: job $SLURM_JOB_ID has no peer cache on $node: $*; its gpufsd reads through the job's other peers and the store" >&2
}

# Peers by default for a store or a web server, never for a path (every node reads the
# cluster file system itself); GPUFS_PEERS=no turns them off.
case ${GPUFS_PEERS:-auto} in
auto) case $GPUFS_SOURCE in s3://* | http://* | https://*) peers=yes ;; *) peers=no ;; esac ;;
yes | no) peers=$GPUFS_PEERS ;;
*) refuse "GPUFS_PEERS=$GPUFS_PEERS in $conf: use yes, no or auto" ;;
esac

# Jobs whose prologs run at once take turns from here (slurmd runs them side by side): what
# one finds free is still free when it takes it. Its children do not keep the lock.
mkdir -p "$runs"
exec 9<"$runs"
flock -w 120 9 || refuse "cannot lock $runs: another job's prolog holds it"

# Another job's mount point is left alone, and this job mounts nothing: it reads what is
# there, and a refusal would drain the node for every job on it.
mnt=$(canonical "$GPUFS_MOUNTPOINT")
if mount_id "$mnt" >/dev/null; then
  skip "job $SLURM_JOB_ID mounts nothing at $GPUFS_MOUNTPOINT: something is mounted there already (another job's dataset?), which goes when that job ends; on nodes shared by jobs, give each its own, e.g. GPUFS_MOUNTPOINT=/mnt/imagenet-\$SLURM_JOB_ID, in $conf"
fi
mkdir -m 0700 "$run" 2>/dev/null || refuse "cannot start job $SLURM_JOB_ID: $run exists (its prolog ran already?)"

# A mount point the prolog makes is the epilog's to remove.
if [ ! -d "$GPUFS_MOUNTPOINT" ]; then
  mkdir -p "$GPUFS_MOUNTPOINT" || fail "cannot make the mount point $GPUFS_MOUNTPOINT"
  : >"$run/made_mountpoint"
fi
set --
if [ "$peers" = yes ]; then
  start_peers
  set -- --peers-file "$run/peers" --peer-secret-file "$run/secret"
fi

# shellcheck disable=SC2086 # GPUFS_MOUNT_OPTIONS is a list of options
if ! "$GPUFSD" mount "$@" -o allow_other ${GPUFS_MOUNT_OPTIONS:-} \
  "$GPUFS_SOURCE" "$GPUFS_MOUNTPOINT" 9>&-; then
  fail "cannot mount $GPUFS_SOURCE at $GPUFS_MOUNTPOINT"
fi
# What the epilog may unmount: this mount, by its id in the mount table and its place.
id=$(mount_id "$mnt") || fail "cannot find $mnt in the mount table after mounting it"
printf '%s %s\n' "$id" "$mnt" >"$run/mount"
