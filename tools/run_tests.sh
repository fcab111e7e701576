#!/usr/bin/env bash
# The whole test suite, from a fresh machine: dependencies, a release build and a clang
# ASan+UBSan build; unit tests under both, end-to-end tests on the release build, store and
# mount tests under the sanitizers, and a short run of each fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install_deps.sh
# The mount tests check byte counts of JPEGs with Python; keep pyc files out of the tree.
export PYTHONDONTWRITEBYTECODE=1

# The release build: what the demo and benchmarks run. Its unit tests, and the end-to-end
# trainers, whose speed the sanitizers would dominate.
[ -d build ] || meson setup build --buildtype=release
ninja -C build
meson test -C build --print-errorlogs --num-processes 1 --suite unit --suite e2e

# One clang build with ASan+UBSan serves the rest: unit, store and mount tests under the
# sanitizers, and the libFuzzer targets of the parsers of untrusted input, run briefly.
if [ ! -d build-san ]; then
  CC=clang CXX=clang++ meson setup build-san --buildtype=debug -Db_sanitize=address,undefined \
    -Db_lundef=false -Dfuzz=true -Dtorch=disabled -Dcuda=disabled
fi
ninja -C build-san
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-san --print-errorlogs --num-processes 1 --suite unit --suite remote \
  --suite mount
bash tools/fuzz.sh --build build-san 15
echo "run_tests: all suites passed"
