#!/usr/bin/env bash
# Installs what gpufs builds, tests and demos with, from Debian 12 packages; with the
# argument "bench", also what the benchmarks compare against. Quick when everything is
# already there: apt runs only for what is missing.
set -euo pipefail

PACKAGES=(
  build-essential meson ninja-build pkg-config clang-format clang libclang-rt-14-dev
  libfuse3-dev fuse3 liburing-dev libcurl4-openssl-dev libpugixml-dev
  libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libxxhash-dev
  libcpp-httplib-dev vmtouch libtorch-dev libjpeg-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torchvision python3-pil
)
if [ "${1:-}" = "bench" ]; then
  PACKAGES+=(squashfuse squashfs-tools python3-matplotlib)
fi

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
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
