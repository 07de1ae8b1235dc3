"""The parallel plans as a config names them: the tensor-parallel styles and ``parallel.pipeline``.

They are apart from :mod:`.tensor_parallel` and :mod:`.pipeline`, which apply them, so that reading a
config imports neither ``torch.distributed.tensor`` nor ``torch.distributed.pipelining`` (which brings
in ``torch._dynamo``: about two seconds at every process's start).
"""
from dataclasses import dataclass
from typing import Optional

from ..errors import ConfigError

#: The names of a tensor-parallel plan's styles (see :func:`~basetrainer.parallel.tensor_parallel.style_of`).
STYLES = ("colwise", "rowwise", "colwise_gather")
#: The schedules of ``torch.distributed.pipelining`` that run one stage per process.
SINGLE_STAGE_SCHEDULES = ("GPipe", "1F1B")
#: Those that run several stages per process (looped placement).
MULTI_STAGE_SCHEDULES = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble")
#: Every schedule ``parallel.pipeline.schedule`` takes (:data:`~basetrainer.parallel.pipeline.SCHEDULES` runs them).
SCHEDULE_NAMES = SINGLE_STAGE_SCHEDULES + MULTI_STAGE_SCHEDULES


@dataclass(frozen=True)
class PipelinePlan:
    """``parallel.pipeline``: the schedule's name, the microbatches per batch (None: one per stage), the units where
    stages begin (None: an even split) and the stages per process (None: 1, or 2 for a schedule that takes several)."""

    schedule: str = "1F1B"
    microbatches: Optional[int] = None
    split: Optional[tuple] = None
    stages_per_rank: Optional[int] = None

    def __post_init__(self):
        self.local_stages  # noqa: B018 (a stages_per_rank the schedule cannot take is refused when the plan is made)

    @property
    def single(self) -> bool:
        """Whether the schedule runs one stage per process."""
        return self.schedule in SINGLE_STAGE_SCHEDULES

    @property
    def local_stages(self) -> int:
        if self.single:
            if self.stages_per_rank not in (None, 1):
                raise ConfigError(f"parallel.pipeline.stages_per_rank is {self.stages_per_rank} and schedule "
                                  f"{self.schedule} runs one stage per process: use one of "
                                  f"{', '.join(MULTI_STAGE_SCHEDULES)}, or set stages_per_rank: 1")
            return 1
        return self.stages_per_rank or 2

    def stages(self, pp: int) -> int:
        return pp * self.local_stages

    def microbatches_for(self, pp: int) -> int:
        return self.microbatches or self.stages(pp)
