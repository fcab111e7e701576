#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build-fuzz and runs each in turn.
#
#   tools/fuzz.sh [--build DIR] [--jobs N] [--fork N] [SECONDS] [TARGET...] [-- FLAGS...]
#
#   SECONDS    how long each target runs (default 30); `tools/fuzz.sh 3600` is an hour each
#   TARGET     mytar, native_index, tar, control, s3_response, aws_config (default: all)
#   --jobs N   N fuzzing processes per target at once (libFuzzer -jobs=N -workers=N), each
#              for SECONDS and sharing the corpus; their logs are
#              build-fuzz/fuzz/TARGET/fuzz-<job>.log
#   --fork N   libFuzzer's fork mode, N child processes fuzzing in turns for SECONDS;
#              with -- -ignore_crashes=1 -ignore_timeouts=1 it keeps going past findings
#              and saves each, to collect several in one long run
#   --build D  the build folder (default build-fuzz, debugoptimized); the test suite gives
#              its clang ASan+UBSan build-san, configured with -Dfuzz=true
#   -- ...     further libFuzzer flags, e.g. -- -max_len=65536
#
# Each target reads the checked-in seeds in tests/fuzz/corpus/TARGET (never written to)
# and adds what it discovers to build-fuzz/fuzz/TARGET/corpus, so a later run goes on
# from there. An input that crashes, leaks, or runs past 10 s (a hang is a finding) is
# saved as build-fuzz/fuzz/TARGET/{crash,leak,timeout,oom}-<sha1>, and the script exits 1
# naming it. Reproduce one with: build-fuzz/tests/fuzz/fuzz_TARGET FILE
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."

ALL_TARGETS=(mytar native_index tar control s3_response aws_config zip gzip decode_plan)
seconds=30
targets=()
extra=()
build="build-fuzz"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --jobs) extra+=("-jobs=$2" "-workers=$2"); shift 2 ;;
    --fork) extra+=("-fork=$2"); shift 2 ;;
    --) shift; extra+=("$@"); break ;;
    [0-9]*) seconds="$1"; shift ;;
    *)
      if [[ " ${ALL_TARGETS[*]} " != *" $1 "* ]]; then
        echo "fuzz: unknown target '$1' (targets: ${ALL_TARGETS[*]})" >&2
        exit 2
      fi
      targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL_TARGETS[@]}")

tools/install_deps.sh
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$build" --buildtype=debugoptimized -Dfuzz=true \
    -Db_sanitize=address,undefined -Db_lundef=false -Dtests=false -Dcuda=disabled \
    -Dtorch=disabled
fi
# Only the fuzz targets and the core they link; the daemon is not needed here.
ninja -C "$build" -j"$(nproc)" "${targets[@]/#/tests/fuzz/fuzz_}"

export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
root="$PWD"
failed=0
for t in "${targets[@]}"; do
  work="$root/$build/fuzz/$t"
  mkdir -p "$work/corpus"
  rm -f "$work"/fuzz-*.log
  dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=("-dict=$root/tests/fuzz/$t.dict")
  touch "$work/.started"
  status=0
  # From inside $work, where -jobs writes its logs; the first corpus folder is the one
  # libFuzzer adds to, the seed folder after it is only read.
  (cd "$work" && exec "$root/$build/tests/fuzz/fuzz_$t" \
    -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/" "${dict[@]}" "${extra[@]}" \
    "$work/corpus" "$root/tests/fuzz/corpus/$t") >"$work/run.log" 2>&1 || status=$?
  mapfile -t found < <(find "$work" -maxdepth 1 -newer "$work/.started" -type f \
    \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  logs=("$work/run.log" "$work"/fuzz-*.log)  # the second is absent without --jobs
  # Final stats, summed over jobs; fork mode prints none, only its "#<runs>:" progress.
  runs=$(awk '/stat::number_of_executed_units:/ { n += $2 }
    /^#[0-9]+/ { r = substr($1, 2) + 0; if (r > m) m = r }
    END { print n ? n : m }' "${logs[@]}")
  if [ "$status" -eq 0 ] && [ ${#found[@]} -eq 0 ]; then
    echo "fuzz: $t: ok (${seconds}s, ${runs:-?} runs)"
    continue
  fi
  failed=1
  echo "fuzz: $t: FAILED (exit $status); log: $work/run.log"
  grep -hE 'catalog invariant broken|ERROR: |SUMMARY: |ALARM: |Test unit written' \
    "${logs[@]}" | sed 's/^/  /' | head -20 || true
  for f in "${found[@]}"; do
    echo "  found: $f"
    echo "  reproduce: $build/tests/fuzz/fuzz_$t $f"
  done
done
exit "$failed"
