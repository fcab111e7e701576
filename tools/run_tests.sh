#!/usr/bin/env bash
# The whole test suite, from a fresh machine: the dependencies; the Debian package, built
# from a clean copy, installed, used from its installed paths (man pages, completion, fstab
# mounts, the end-to-end trainers), linted and purged; then a clang ASan+UBSan build for
# the unit, store and mount tests under the sanitizers, and a short run of each fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install_deps.sh
# The mount tests check byte counts of JPEGs with Python; keep pyc files out of the tree.
export PYTHONDONTWRITEBYTECODE=1

# The release build is the package's (-O2, hardened, as users install it). Its unit tests
# run below under the sanitizers, so none are built here.
DEB_BUILD_OPTIONS="nocheck noddebs" tools/build_deb.sh build-deb
deb=$(ls build-deb/gpufs_*.deb)
GPUFS_DEB=$deb /usr/bin/python3 tests/package/test_package.py

# One clang build with ASan+UBSan serves the rest: unit, store and mount tests under the
# sanitizers (at -O1, which they run several times faster at than -O0), and the libFuzzer
# targets of the parsers of untrusted input, 10 s each.
if [ ! -d build-san ]; then
  CC=clang CXX=clang++ meson setup build-san --buildtype=debug -Doptimization=1 \
    -Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=true -Dtorch=disabled \
    -Dcuda=disabled
fi
ninja -C build-san
# The sanitizers' options for both test runs; the fuzz targets keep their own.
sanitized=(env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1)
"${sanitized[@]}" meson test -C build-san --print-errorlogs --num-processes 1 --suite unit --suite remote \
  --suite mount
# The mount tests once more with the kernel's requests over io_uring, where the kernel has
# FUSE over io_uring: --fuse-transport auto takes it once the fuse module allows it.
uring=/sys/module/fuse/parameters/enable_uring
if [ -w "$uring" ]; then
  was=$(cat "$uring")
  trap 'echo "$was" > "$uring"' EXIT
  echo Y > "$uring"
  "${sanitized[@]}" meson test -C build-san --print-errorlogs --num-processes 1 --suite mount
  echo "$was" > "$uring"
  trap - EXIT
else
  echo "run_tests: the mount tests ran on /dev/fuse only: $uring is missing or not writable"
fi
bash tools/fuzz.sh --build build-san 10
echo "run_tests: all suites passed"
