"""The tuning tools' own settings, declared once: the functions check their arguments against them, and the
commands make their flags from them. A bad value is a one-line ConfigError before any work starts."""
from ..config.kinds import Integer, Number
from ..config.schema import Schema, Setting
from ..errors import ConfigError

LR_FIND = "lr_find"
BATCH_FIND = "batch_find"

LR_FIND_SETTINGS = Schema([
    Setting("min_lr", Number(minimum=0, above=True), 1e-7, "the learning rate the sweep starts at", group=LR_FIND,
            flag={}),
    Setting("max_lr", Number(minimum=0, above=True), 10.0, "the learning rate the sweep ends at (above min_lr)",
            group=LR_FIND, flag={}),
    Setting("num_steps", Integer(minimum=2), 100, "optimizer steps of the sweep, the lr growing exponentially",
            unit="steps", group=LR_FIND, flag={}),
    Setting("smooth", Number(minimum=0, maximum=1, below=True), 0.98,
            "the loss's exponential smoothing factor (0: none)", group=LR_FIND, flag={}),
    Setting("diverge", Number(minimum=1, above=True), 4.0,
            "the sweep stops once the smoothed loss, or the median of the last 5 losses, exceeds this many times the "
            "lowest smoothed loss", group=LR_FIND, flag={}),
])

BATCH_FIND_SETTINGS = Schema([
    Setting("first_size", Integer(minimum=1), 2, "the batch size tried first, then doubled",
            unit="samples per process", group=BATCH_FIND, flag={}),
    Setting("max_memory", Number(minimum=0, above=True), None,
            "the memory a batch may take, as peak growth during its steps (null: on the CPU 80% of the memory "
            "available at the start, shared by the job's processes; on CUDA all the GPU can give)",
            unit="MiB", nullable=True, group=BATCH_FIND, flag={}),
    Setting("steps", Integer(minimum=1), 3, "timed optimizer steps per batch size, after one untimed",
            unit="steps", group=BATCH_FIND, flag={}),
    Setting("max_trials", Integer(minimum=1), 25, "batch sizes tried at most", group=BATCH_FIND, flag={}),
])


def check_lr_find(values: dict, source="") -> dict:
    """``values`` of ``LR_FIND_SETTINGS`` (missing ones take their defaults), checked, with ``max_lr`` above
    ``min_lr``."""
    checked = {**LR_FIND_SETTINGS.defaults(), **LR_FIND_SETTINGS.check(values, source, strict=True)}
    if checked["max_lr"] <= checked["min_lr"]:
        raise ConfigError(f"max_lr {checked['max_lr']:g} is not above min_lr {checked['min_lr']:g}: the sweep goes "
                          f"up from min_lr to max_lr; give a max_lr above min_lr (e.g. min_lr 1e-7, max_lr 10)")
    return checked


def check_batch_find(values: dict, source="") -> dict:
    """``values`` of ``BATCH_FIND_SETTINGS`` (missing ones take their defaults), checked."""
    return {**BATCH_FIND_SETTINGS.defaults(), **BATCH_FIND_SETTINGS.check(values, source, strict=True)}
