#!/usr/bin/env bash
# The whole test suite, from a fresh machine: dependencies, a release build and an
# ASan+UBSan build, then unit, mount and end-to-end tests (mount tests under both), and a
# short run of each fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install_deps.sh
# The mount tests check byte counts of JPEGs with Python; keep pyc files out of the tree.
export PYTHONDONTWRITEBYTECODE=1

[ -d build ] || meson setup build --buildtype=release
ninja -C build
meson test -C build --print-errorlogs --num-processes 1

[ -d build-asan ] || meson setup build-asan --buildtype=debug -Db_sanitize=address,undefined \
  -Db_lundef=false
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --print-errorlogs --num-processes 1 --suite unit --suite mount
# The parsers of untrusted input under libFuzzer, briefly (clang, ASan+UBSan, build-fuzz).
bash tools/fuzz.sh 20
echo "run_tests: all suites passed"
