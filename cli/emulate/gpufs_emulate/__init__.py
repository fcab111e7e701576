"""gpufs-emulate: emulated accelerators over a real input pipeline."""
