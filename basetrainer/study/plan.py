"""What a study runs: its settings, declared once, checked before anything is written, and each run's command line.

A run is the training command (``python -m basetrainer train``, or the user's script) with the
study's training arguments, then the keys the study sets for that run, last so that they win::

    batch_size=<N> work_dir=<out>/run_bs<N> lr_scaling={rule: linear, base_batch_size: 64}
    target={metric: Acc, value: 98.0, mode: max, stop: false} [distributed=true gpu_id=[0,1,...]]

Every run gets the same training arguments, hence the same seed (``seed``), data and schedule.
"""
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Optional

from ..config.kinds import Boolean, Choice, Integer, ListOf, Number, Text
from ..config.schema import Schema, Setting
from ..errors import ConfigError

RULES = ("linear", "sqrt", "none")
RUN_FOLDER = "run_bs{}"  # each run's work_dir under the study's folder
PLAN_FILE = "study.json"  # the study's settings, so that a study started again continues only the same study

STUDY_SETTINGS = Schema([
    Setting("batch_sizes", ListOf(Integer(minimum=1), min_length=1, unique=True), None,
            "the batch sizes to run, one run each, per process (the global batch is this x --processes x "
            "accumulate_grad_batches)", unit="samples per process",
            flag={"names": ("--batch-sizes",), "required": True, "metavar": "N"}),
    Setting("processes", Integer(minimum=1), 1,
            "data-parallel processes per run (distributed=true gpu_id=[0..N-1]: N GPUs, or N CPU processes with "
            "gloo without CUDA)", flag={"names": ("--processes",), "metavar": "N"}),
    Setting("out", Text(non_empty=True, meaning="a path"), os.path.join("work_dirs", "study"),
            "the study's folder: run_bs<N>/ (each run's work_dir), study.csv, study.md, study.png",
            flag={"names": ("--out",), "metavar": "DIR"}),
    Setting("rule", Choice(*RULES), "linear",
            "how the lr follows the global batch (lr_scaling.rule): linear (Goyal et al. 2017, SGD), sqrt "
            "(Adam-type optimizers) or none", flag={"names": ("--rule",)}),
    Setting("base_batch_size", Integer(minimum=1), None,
            "the global batch the config's lr was tuned at (lr_scaling.base_batch_size); needed unless --rule none",
            unit="samples", nullable=True, flag={"names": ("--base-batch-size",), "metavar": "N"}),
    Setting("target_metric", Text(non_empty=True, meaning="a metric name"), "Acc",
            "the evaluated metric the study compares: its target, best and final value (Acc, test/Acc, loss...)",
            flag={"names": ("--target-metric",), "metavar": "NAME"}),
    Setting("target_value", Number(), None,
            "the value a run must reach (target.value); without it the runs have no target, the tables no time to "
            "it",
            nullable=True, flag={"names": ("--target-value",), "metavar": "X"}),
    Setting("target_mode", Choice("max", "min"), "max", "max: reached at or above the value; min (losses): at or below",
            flag={"names": ("--target-mode",)}),
    Setting("stop_at_target", Boolean(), False,
            "end each run when it reaches the target (target.stop: faster, but no final value to compare)",
            flag={"names": ("--stop-at-target",)}),
    Setting("script", Text(non_empty=True, meaning="a path"), None,
            "your training script, which takes key=value config overrides (without it: python -m basetrainer train)",
            nullable=True, flag={"names": ("--script",), "metavar": "PATH"}),
])


@dataclass(frozen=True)
class StudyPlan:
    """A checked study: the batch sizes, how each run is started, and what every run shares.

    ``train_args`` are the training command's flags and ``key=value`` overrides, as typed after ``--``.
    """

    batch_sizes: tuple
    train_args: tuple = ()
    processes: int = 1
    out: str = os.path.join("work_dirs", "study")
    rule: str = "linear"
    base_batch_size: Optional[int] = None
    target_metric: str = "Acc"
    target_value: Optional[float] = None
    target_mode: str = "max"
    stop_at_target: bool = False
    script: Optional[str] = None
    python: str = field(default=sys.executable, compare=False)

    @classmethod
    def from_settings(cls, values: dict, train_args=(), source: str = "") -> "StudyPlan":
        """The plan for ``values`` (names of ``STUDY_SETTINGS``; missing ones take their defaults), checked:
        a one-line ConfigError for the first problem, before anything is written."""
        sizes = list(values.get("batch_sizes") or [])
        repeated = sorted({size for size in sizes if sizes.count(size) > 1})
        if repeated:
            raise ConfigError(f"--batch-sizes {' '.join(map(str, sizes))}: {', '.join(map(str, repeated))} given "
                              f"more than once; give each batch size once")
        checked = {**STUDY_SETTINGS.defaults(), **STUDY_SETTINGS.check(values, source, strict=True)}
        if checked["batch_sizes"] is None:
            raise ConfigError("a study needs --batch-sizes, e.g. --batch-sizes 16 32 64 128")
        if checked["rule"] != "none" and checked["base_batch_size"] is None:
            raise ConfigError(f"--rule {checked['rule']} scales the lr from the global batch it was tuned at: give "
                              f"--base-batch-size (64 for the classification task's defaults), or --rule none")
        if checked["script"] is not None and not os.path.isfile(checked["script"]):
            raise ConfigError(f"--script {checked['script']}: no such file; give the path of your training script")
        plan = cls(batch_sizes=tuple(checked.pop("batch_sizes")), train_args=tuple(map(str, train_args)), **checked)
        plan._check_train_args()
        return plan

    # ------------------------------------------------------------------ the runs
    def run_dir(self, batch_size: int) -> str:
        return os.path.join(self.out, RUN_FOLDER.format(batch_size))

    def overrides(self, batch_size: int) -> list:
        """The ``key=value`` arguments the study adds for the run of ``batch_size`` (see the module docstring)."""
        scaling = {"rule": self.rule, **({"base_batch_size": self.base_batch_size} if self.rule != "none" else {})}
        keys = [f"batch_size={batch_size}", f"work_dir={self.run_dir(batch_size)}", f"lr_scaling={json.dumps(scaling)}"]
        if self.target_value is not None:
            target = {"metric": self.target_metric, "value": self.target_value, "mode": self.target_mode,
                      "stop": self.stop_at_target}
            keys.append(f"target={json.dumps(target)}")
        if self.processes > 1:
            keys += ["distributed=true", f"gpu_id={json.dumps(list(range(self.processes)))}"]
        return keys

    def command(self, batch_size: int) -> list:
        """The run's command line: this Python, the training command, the training arguments, the overrides."""
        trainer = [self.script] if self.script else ["-m", "basetrainer", "train"]
        return [self.python, *trainer, *self.train_args, *self.overrides(batch_size)]

    # ------------------------------------------------------------------ continuing a study
    def settings(self) -> dict:
        """What makes two studies the same study, whatever their batch sizes: written to ``study.json``."""
        values = asdict(self)
        for name in ("batch_sizes", "python"):
            values.pop(name)
        values["train_args"] = list(values["train_args"])
        return values

    def check_continues(self) -> None:
        """A study folder that holds another study's runs (other settings than these, batch sizes aside) is
        refused: its rows would sit in one table with these."""
        path = os.path.join(self.out, PLAN_FILE)
        if not os.path.isfile(path):
            return
        with open(path, encoding="utf-8") as stream:
            earlier = json.load(stream)
        differing = sorted(name for name in {*earlier, *self.settings()}
                           if earlier.get(name) != self.settings().get(name))
        if differing:
            raise ConfigError(f"--out {self.out} holds a study with other settings ({', '.join(differing)} differ: "
                              f"see {path}); choose another --out, or give the same settings to continue it")


    def _check_train_args(self) -> None:
        """Refuses a training argument that sets a key the study sets for each run: it would be overridden
        without a word (``distributed`` too: the processes are ``--processes``)."""
        owned = {"batch_size": "--batch-sizes", "work_dir": "--out", "lr_scaling": "--rule and --base-batch-size",
                 "distributed": "--processes"}
        if self.target_value is not None:
            owned["target"] = "--target-metric and --target-value"
        if self.processes > 1:
            owned["gpu_id"] = "--processes"
        for argument in self.train_args:
            key = _key_of(argument)
            if key in owned:
                raise ConfigError(f"{argument!r} after --: the study sets {key} for each run (from {owned[key]}); "
                                  f"drop it")


def _key_of(argument: str):
    """The config key a training argument sets: ``lr`` of ``lr=0.1``, ``optim`` of ``optim.lr=0.1``,
    ``batch_size`` of ``--batch_size`` or ``--batch_size=8``; None for anything else (a flag's value)."""
    if argument.startswith("--"):
        return argument[2:].split("=", 1)[0]
    if "=" in argument and not argument.startswith("-"):
        return argument.split("=", 1)[0].split(".", 1)[0]
    return None
