#!/usr/bin/env bash
# Installs, from Debian 12 packages, what gpufs needs for one purpose:
#   demo     build it and run tools/demo.sh
#   package  build the Debian package (tools/build_deb.sh)
#   test     the whole test suite (the default)
#   bench    the test suite and what the benchmarks compare against
# Quick when everything is already there: apt runs only for what is missing.
set -euo pipefail

# What builds gpufs (the demo's build and the package's).
BUILD=(
  build-essential meson ninja-build pkg-config
  libfuse3-dev fuse3 liburing-dev libcurl4-openssl-dev libpugixml-dev
  libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libxxhash-dev
  # Content hashes (SHA-256 from libcrypto).
  libssl-dev
  # Compressed archives: gzip streams (zlib's first pass, ISA-L's group decoding), zip
  # members and CRC-32s (libdeflate).
  zlib1g-dev libisal-dev libdeflate-dev
)
# The demo: a sample of real JPEGs, an unmodified torchvision trainer.
DEMO=(python3-torchvision python3-pil)
# The Debian package: debhelper, and the unit tests it runs on what it packaged.
PACKAGE=(debhelper dpkg-dev fakeroot libgtest-dev libgmock-dev)
# The whole test suite, beyond the above.
TEST=(
  clang libclang-rt-14-dev
  vmtouch libtorch-dev libjpeg-dev libbenchmark-dev
  # The style checks (docs/style.md): the C++'s formatting and the Python's lint.
  clang-format pyflakes3
  # The --plot of gpufs-stat --advise and gpufs-emulate.
  python3-matplotlib
  # Test servers (tests/servers): nginx with the Lua module, and a one-node Ceph S3 store
  # (monmaptool is in ceph-base; ceph-authtool, radosgw-admin and ceph in ceph-common).
  nginx-extras radosgw ceph-mon ceph-osd ceph-base ceph-common
  # Checks of deploy/ (tests/mount/test_deploy.py): its shell scripts and its manifest.
  shellcheck python3-yaml
  # The tar corpus tests (bsdtar), and the compressed archives' (what makes and checks
  # them: zip and unzip, 7-Zip, pigz, bgzip, zstd, xz, bzip2).
  libarchive-tools zip unzip p7zip-full pigz tabix zstd xz-utils bzip2
  # The package's test: lint it, read its man pages, load its completion.
  lintian man-db bash-completion
)
case "${1:-test}" in
  demo) PACKAGES=("${BUILD[@]}" "${DEMO[@]}") ;;
  package) PACKAGES=("${BUILD[@]}" "${PACKAGE[@]}") ;;
  test) PACKAGES=("${BUILD[@]}" "${DEMO[@]}" "${PACKAGE[@]}" "${TEST[@]}") ;;
  bench)
    PACKAGES=("${BUILD[@]}" "${DEMO[@]}" "${PACKAGE[@]}" "${TEST[@]}"
      squashfuse squashfs-tools s3fs rclone archivemount)
    ;;
  *)
    echo "usage: $0 [demo|package|test|bench]" >&2
    exit 2
    ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install_deps: installing ${missing[*]}"

# Without systemd, the packages' scripts would start nginx (on 0.0.0.0:80) and the Ceph
# daemons; a policy-rc.d that answers 101 ("action forbidden") stops them doing so. Ours
# only if there is none, removed again however the install ends.
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod 755 "$POLICY"
  trap '$SUDO rm -f "$POLICY"' EXIT
fi
nginx_before=$(pgrep -x nginx || true)

$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

# The tests start their own nginx on loopback; one the install started anyway would hold
# port 80. Stop it through its own pid file.
if [ -z "$nginx_before" ] && pgrep -x nginx >/dev/null; then
  echo "install_deps: stopping the nginx the install started"
  $SUDO nginx -s quit || true
fi
