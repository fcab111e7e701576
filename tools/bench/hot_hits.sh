#!/bin/sh
# Builds tools/bench/hot_hits.cc against ROOT's headers and BUILD's libraries (default: this
# tree and its build/) and runs it: hits/s of GroupCache::Read by 1, 2, 4 and 8 threads.
# Compare two builds of the cache by pointing ROOT at another worktree.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=${1:-$(cd "$here/../.." && pwd)}
build=${2:-$root/build}
out=$(mktemp -d)
c++ -std=c++20 -O3 -DNDEBUG -pthread -DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB \
  -DSPDLOG_FMT_EXTERNAL -I"$root" -I"$build" "$here/hot_hits.cc" -o "$out/hot_hits" \
  -Wl,--start-group "$build"/libgpufs_cache.a "$build"/libgpufs_source.a \
  "$build"/libgpufs_dataset.a -Wl,--end-group -lfmt -lspdlog -lxxhash -luring -lcurl \
  -lpugixml -lcrypto -ldl
"$out/hot_hits" "${HOT_HITS_THREADS:-8}" "${HOT_HITS_SECONDS:-1}"
rm -rf "$out"
