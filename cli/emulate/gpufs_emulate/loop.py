"""A training loop whose accelerator is emulated: it takes each batch from the loader as
a real loop does and, in place of forward/backward, spends the profiled step time."""
import time
from typing import Callable, Iterable, Optional

from .stall import RankEpoch, Step


def sleeping_step(step_s: float) -> Callable[[object], None]:
    """The emulated accelerator: busy for step_s, measured against the clock so that a
    late wake-up is not counted twice (the next step starts from the real end)."""
    def step(_batch):
        time.sleep(step_s)
    return step


def batch_size_of(batch) -> int:
    """How many images a batch holds (a (images, targets) pair, as ImageFolder yields)."""
    targets = batch[1] if isinstance(batch, (tuple, list)) and len(batch) == 2 else batch
    try:
        return len(targets)
    except TypeError:
        return 1


def run_epoch(rank: int, loader: Iterable, step: Callable[[object], None],
              sync: Optional[Callable[[], None]] = None, max_steps: int = 0,
              on_step: Optional[Callable[[Step], None]] = None,
              clock: Callable[[], float] = time.monotonic) -> RankEpoch:
    """Runs one epoch; every instant comes from `clock` so the parts add up to the wall."""
    epoch = RankEpoch(rank)
    start = clock()
    for batch in loader:
        ready = clock()
        step(batch)
        busy_end = clock()
        if sync:
            sync()
        end = clock()
        s = Step(start, ready, busy_end, end, batch_size_of(batch))
        epoch.steps.append(s)
        if on_step:
            on_step(s)
        start = end
        if max_steps and len(epoch.steps) >= max_steps:
            break
    return epoch
