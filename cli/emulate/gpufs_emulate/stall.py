"""The stall arithmetic: what the emulated accelerators did with their time.

Each step of a rank leaves four instants on one monotonic clock (the same on every rank):

    previous step's end -> batch ready -> compute done -> all-reduce done

so a rank's wall time is exactly busy (compute) + data wait + sync wait, by construction.
The split of the waits into *fetch* stall (storage) and *prep* stall (decode and
augmentation on the CPUs) follows DS-Analyzer: a second pass over data held in memory
runs the same loaders at the same demand, and whatever it still waits is prep; the rest
of a measured epoch's wait is fetch.
"""
from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class Step:
    start: float  # the previous step's end (or the epoch's start)
    ready: float  # the batch is in hand
    busy_end: float  # the accelerator's work is done
    end: float  # the step's all-reduce is done (= busy_end without one)
    images: int

    @property
    def data_wait(self):
        return self.ready - self.start

    @property
    def busy(self):
        return self.busy_end - self.ready

    @property
    def sync_wait(self):
        return self.end - self.busy_end


@dataclass
class RankEpoch:
    """One rank's epoch: its steps in order."""
    rank: int
    steps: List[Step] = field(default_factory=list)

    @property
    def start(self):
        return self.steps[0].start if self.steps else 0.0

    @property
    def end(self):
        return self.steps[-1].end if self.steps else 0.0

    @property
    def wall(self):
        return self.end - self.start

    @property
    def busy(self):
        return sum(s.busy for s in self.steps)

    @property
    def data_wait(self):
        return sum(s.data_wait for s in self.steps)

    @property
    def sync_wait(self):
        return sum(s.sync_wait for s in self.steps)

    @property
    def waiting(self):
        return self.data_wait + self.sync_wait

    @property
    def images(self):
        return sum(s.images for s in self.steps)


@dataclass
class PrepRate:
    """What a rank waits with its data in memory: the first step (its loader's workers
    start and fill their first batches) and each step after it."""
    first_wait: float
    per_step_wait: float

    def expected(self, steps):
        """The prep stall of an epoch of `steps` steps."""
        if steps <= 0:
            return 0.0
        return self.first_wait + self.per_step_wait * (steps - 1)


def prep_rate_of(resident: RankEpoch) -> Optional[PrepRate]:
    """The prep rate that a resident pass measured (None: it made no step)."""
    if not resident.steps:
        return None
    waits = [s.data_wait + s.sync_wait for s in resident.steps]
    later = waits[1:]
    return PrepRate(waits[0], sum(later) / len(later) if later else 0.0)


@dataclass
class Split:
    wall: float
    busy: float
    waiting: float
    fetch: float  # seconds the accelerator waited on storage
    prep: float  # seconds it waited on decode and augmentation

    def fraction(self, seconds):
        return seconds / self.wall if self.wall > 0 else 0.0


def split(epoch: RankEpoch, prep: Optional[PrepRate]) -> Split:
    """A rank's epoch with its waits split into fetch and prep stall. Without a resident
    pass every wait counts as fetch (an upper bound, said so by the report)."""
    waiting = epoch.waiting
    prep_s = min(waiting, prep.expected(len(epoch.steps))) if prep else 0.0
    return Split(epoch.wall, epoch.busy, waiting, waiting - prep_s, prep_s)


@dataclass
class JobEpoch:
    """Every rank's epoch together: the job's wall is the slowest rank's."""
    ranks: List[RankEpoch]

    @property
    def start(self):
        return min(r.start for r in self.ranks if r.steps)

    @property
    def end(self):
        return max(r.end for r in self.ranks if r.steps)

    @property
    def wall(self):
        return self.end - self.start if any(r.steps for r in self.ranks) else 0.0

    @property
    def images(self):
        return sum(r.images for r in self.ranks)

    @property
    def images_per_second(self):
        return self.images / self.wall if self.wall > 0 else 0.0


def prep_rates(resident: JobEpoch):
    """{rank: PrepRate} of every rank of a resident pass that made a step."""
    rates = {r.rank: prep_rate_of(r) for r in resident.ranks}
    return {rank: rate for rank, rate in rates.items() if rate}


def job_split(job: JobEpoch, prep_rates) -> Split:
    """The ranks' splits summed: fractions of the job are shares of all ranks' time."""
    parts = [split(r, prep_rates.get(r.rank) if prep_rates else None) for r in job.ranks]
    return Split(sum(p.wall for p in parts), sum(p.busy for p in parts),
                 sum(p.waiting for p in parts), sum(p.fetch for p in parts),
                 sum(p.prep for p in parts))
