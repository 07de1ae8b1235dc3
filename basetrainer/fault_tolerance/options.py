"""The ``fault_tolerance`` and ``local_sgd: {mode: diloco}`` settings, read and checked before anything is built."""
from dataclasses import dataclass
from typing import Optional

from ..errors import ConfigError


@dataclass(frozen=True)
class DiLoCoOptions:
    """``local_sgd`` in mode diloco: every ``period`` optimizer steps an outer SGD step (``outer_lr``,
    ``outer_momentum``, ``outer_nesterov``) on the replica groups' averaged change of one of ``fragments`` parts
    of the model, in turn; each part's average is sent ``fragment_sync_delay`` steps before it is applied."""

    period: int
    outer_lr: float
    outer_momentum: float
    outer_nesterov: bool
    fragments: int
    fragment_sync_delay: int

    @property
    def steps_per_sync(self) -> int:
        """The optimizer steps between two syncs, each of one fragment (``period`` / ``fragments``)."""
        return self.period // self.fragments


@dataclass(frozen=True)
class FaultTolerance:
    """``fault_tolerance`` (see :mod:`basetrainer.fault_tolerance`); ``diloco`` is the DiLoCo mode's
    :class:`DiLoCoOptions`, or None (the groups average their gradients every step)."""

    replica_groups: int = 0
    group_id: Optional[int] = None
    lighthouse: str = "auto"
    min_replicas: int = 1
    heartbeat_ms: int = 1000
    join_timeout_ms: int = 30_000
    max_restarts: int = 3
    timeout: float = 60.0
    diloco: Optional[DiLoCoOptions] = None

    @property
    def enabled(self) -> bool:
        return self.replica_groups > 0

    @property
    def commit_every(self) -> int:
        """The optimizer steps between two commits of the groups (1, or DiLoCo's steps between syncs)."""
        return self.diloco.steps_per_sync if self.diloco else 1

    @classmethod
    def from_settings(cls, values: dict, local_sgd: dict) -> "FaultTolerance":
        """From the checked ``fault_tolerance`` and ``local_sgd`` mappings; the combinations that cannot work are
        a one-line ConfigError here."""
        diloco = local_sgd["mode"] == "diloco"
        if not values["replica_groups"]:
            if diloco:
                raise ConfigError("local_sgd.mode: diloco runs across replica groups and fault_tolerance is off: set "
                                  "fault_tolerance.replica_groups (e.g. 2), or local_sgd.mode: average")
            return cls()
        if values["min_replicas"] > values["replica_groups"]:
            raise ConfigError(f"fault_tolerance.min_replicas ({values['min_replicas']}) is more than replica_groups "
                              f"({values['replica_groups']}): no step could ever commit; lower min_replicas")
        if values["group_id"] is not None and values["group_id"] >= values["replica_groups"]:
            raise ConfigError(f"fault_tolerance.group_id {values['group_id']} is not one of the {values['replica_groups']} "
                              f"replica groups (0 to {values['replica_groups'] - 1})")
        if local_sgd["period"] and not diloco:
            raise ConfigError("local_sgd (mode average) under fault_tolerance: the replica groups average through "
                              "torchft; set local_sgd.mode: diloco, or local_sgd.period: 0")
        return cls(**values, diloco=_diloco(local_sgd) if diloco else None)


def _diloco(local_sgd: dict) -> DiLoCoOptions:
    period, fragments, delay = local_sgd["period"], local_sgd["fragments"], local_sgd["fragment_sync_delay"]
    if not period:
        raise ConfigError("local_sgd.mode: diloco needs local_sgd.period, the optimizer steps between two outer "
                          "steps (e.g. 20)")
    if local_sgd["warmup_steps"]:
        raise ConfigError("local_sgd.warmup_steps applies to mode average (post-local SGD); DiLoCo has none: set it "
                          "to 0")
    if period % fragments:
        raise ConfigError(f"local_sgd.period ({period}) is not a multiple of local_sgd.fragments ({fragments}): each "
                          f"fragment syncs every period / fragments steps; make period a multiple")
    if delay >= period // fragments:
        raise ConfigError(f"local_sgd.fragment_sync_delay ({delay}) must be less than period / fragments "
                          f"({period // fragments}): a fragment's average must arrive before the next one is sent")
    return DiLoCoOptions(period, float(local_sgd["outer_lr"]), float(local_sgd["outer_momentum"]),
                         local_sgd["outer_nesterov"], fragments, delay)
