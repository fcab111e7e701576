"""A one-line progress bar on the terminal while a pass runs (nothing off a terminal)."""
import sys
import time


class Bar:
    def __init__(self, enabled: bool, demand: float, stream=sys.stderr):
        self.enabled = enabled and stream.isatty()
        self.demand = demand
        self.stream = stream
        self.label, self.total, self.start = "", 1, time.monotonic()

    def begin(self, label: str, total_steps: int):
        self.label, self.total, self.start = label, max(1, total_steps), time.monotonic()

    def draw(self, per_rank):
        """per_rank: (steps, images, waiting seconds) of each rank so far in this pass."""
        if not self.enabled:
            return
        elapsed = max(1e-6, time.monotonic() - self.start)
        steps = sum(p[0] for p in per_rank)
        images = sum(p[1] for p in per_rank)
        waiting = sum(p[2] for p in per_rank) / (elapsed * len(per_rank))
        done = min(1.0, steps / self.total)
        width = 24
        bar = "=" * int(done * width) + ">" + " " * (width - int(done * width))
        self.stream.write(f"\r\033[K{self.label} [{bar[:width]}] {100 * done:3.0f}%  "
                          f"{images / elapsed:,.0f} images/s"
                          + (f" of {self.demand:,.0f}  " if self.demand else "  ") +
                          f"waiting {100 * min(1.0, waiting):.0f}%   ")
        self.stream.flush()

    def end(self):
        if self.enabled:
            self.stream.write("\r\033[K")  # the line cleared, whatever its length
            self.stream.flush()
