#!/usr/bin/env bash
# Builds the Debian package of gpufs from a clean copy of the tree (what git tracks, and
# new files it does not ignore), with debhelper: the version is meson.build's.
#
#   tools/build_deb.sh [OUT]      (OUT: build-deb by default)
#
# Leaves OUT/gpufs_VERSION_ARCH.deb and, in OUT/gpufs-VERSION, the copy it was built from
# with its build folder (obj-*), whose tests run on what was packaged. DEB_BUILD_OPTIONS
# is passed on (nocheck: no unit tests, none built). Needs the Build-Depends of
# debian/control (tools/install_deps.sh installs them) and git.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-build-deb}")
version=$(sed -n "s/^ *version: '\([^']*\)',$/\1/p" meson.build | head -n 1)
[ -n "$version" ] || { echo "build_deb: no version in meson.build" >&2; exit 1; }
src="$out/gpufs-$version"
rm -rf "$out"
mkdir -p "$src"
# A clean copy: no build folders, samples or caches of this checkout.
git ls-files -z --cached --others --exclude-standard |
  tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$src"
# Debian's changelog carries the package's version: written from meson.build's.
cat >"$src/debian/changelog" <<CHANGELOG
gpufs ($version) unstable; urgency=medium

  * Version $version, built from the source tree.

 -- gpufs maintainers <maintainers@gpufs.invalid>  $(date -R)
CHANGELOG
(cd "$src" && dpkg-buildpackage -b -us -uc)
echo "build_deb: $out/gpufs_${version}_$(dpkg --print-architecture).deb"
