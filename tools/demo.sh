#!/usr/bin/env bash
# The main job on a built-in sample, from a fresh machine: installs dependencies, builds,
# makes a dataset of real JPEGs grouped in the mytar layout, mounts it with gpufsd, trains
# an unmodified torchvision script through the mount, shows what each cache tier holds
# (gpufs-stat), and unmounts.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install_deps.sh demo
# The demo's build: no test suites (tools/run_tests.sh builds its own).
[ -d build ] || meson setup build --buildtype=release -Dtests=false
ninja -C build

SAMPLE=sample
if [ ! -f "$SAMPLE/mytar/8/metadata.txt" ]; then
  rm -rf "$SAMPLE"
  /usr/bin/python3 tools/make_sample.py "$SAMPLE" --classes 10 --per-class 40 --group-size 8
fi
MNT="$SAMPLE/mnt"
mkdir -p "$MNT"
if mountpoint -q "$MNT"; then build/cli/gpufsd unmount "$MNT"; fi

echo "+ gpufsd mount $SAMPLE/mytar $MNT"
build/cli/gpufsd mount "$SAMPLE/mytar" "$MNT"
trap 'build/cli/gpufsd unmount "$MNT" && echo "+ unmounted $MNT"' EXIT

echo "+ ls $MNT"
ls "$MNT"
# sed reads to the end (head would exit early and fail the pipe under pipefail)
first=$(find "$MNT" -type f -name '*.JPEG' | sort | sed -n 1p)
echo "+ where $first lives:"
for attr in blob offset size; do
  printf '  %-7s %s\n' "$attr" "$(/usr/bin/python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], sys.argv[2]).decode())' "$first" "user.gpufs.$attr")"
done
echo "+ df -h $MNT"
df -h "$MNT"

echo "+ python3 tools/train_demo.py $MNT    (gpufs-stat -w records the daemon meanwhile)"
build/cli/gpufs-stat -w --interval 1 "$MNT" >"$SAMPLE/watch.log" 2>&1 &
watcher=$!
/usr/bin/python3 tools/train_demo.py "$MNT" --epochs 2
kill -INT "$watcher" && wait "$watcher" || true

echo "+ gpufs-stat -c $MNT    (what each cache tier holds, vmtouch-style, and per class)"
build/cli/gpufs-stat -c "$MNT"
echo "+ gpufs-stat -w $MNT, one line a second during training (a live screen on a terminal):"
cut -c1-160 "$SAMPLE/watch.log"
echo "+ gpufs-stat --advise $MNT    (was training waiting on data, and what would stop it)"
build/cli/gpufs-stat --advise "$MNT"
echo "+ gpufs-emulate --model resnet50 --gpu h100 --gpus 2 --batch 32 --workers 2 $MNT    (would two H100s be fed?)"
build/cli/gpufs-emulate --model resnet50 --gpu h100 --gpus 2 --batch 32 --workers 2 "$MNT"
