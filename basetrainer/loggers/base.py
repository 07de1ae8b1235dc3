"""The logger interface: where LogHistory sends a run's parameters, scalars, epoch records and files."""
import importlib.util

import torch

from ..errors import ConfigError


class Logger:
    """Receives what :class:`~basetrainer.callbacks.log_history.LogHistory` reports, on the main process only.

    LogHistory calls, in this order::

        start(history, resumed, step)      # at train begin
        log_params(params)                 # a fresh run only: the flattened config
        log_metrics(scalars, step)         # every log_freq batches: {"train/loss_step": 0.41, ...}
        # at each epoch end: {"epoch": 1, "lr": ..., "train": {...}, "test": {...}}
        log_epoch(record, step)
        log_text(name, text, step)         # text a callback shows (a language model's completions)
        log_artifact(path)                 # at train end: the curves picture, the files the run names
        close(failed)                      # at train end, or when training raised (failed=True)

    ``step`` is the global batch (``epoch * batches_per_epoch + batch``, from 0): the
    per-step scalars and the epoch records (at the step of the epoch's last batch) share
    one axis. ``record["epoch"]`` counts from 1; its ``train`` and ``test`` hold floats,
    nested where a recorder publishes groups (``{"loss": {"cls": 0.3, "box": 0.1}}``).

    ``start`` gets the records of the epochs finished before this run (what a resumed run
    keeps of the earlier history), whether the run continues an earlier one, and the
    global step it starts at (None when the loader has no length): what an earlier run
    logged from that step on is run again and replaced.

    A logger implements what it takes; the others do nothing. ``state_dict`` /
    ``load_state_dict`` carry what a logger needs to continue after a resume (a
    tracker's run id), in the checkpoint, under its ``name``.

    A logger that prints each epoch's test accuracy (a trainer's ``LogHistory(..., loggers=[...])``
    calls it)::

        >>> from basetrainer.loggers import Logger
        >>> class PrintAccuracy(Logger):
        ...     name = "print"
        ...     def log_epoch(self, record, step):
        ...         print(f"epoch {record['epoch']}: {record['test']['Acc']:.1f}%")
        >>> record = {"epoch": 3, "lr": 0.1, "train": {}, "test": {"Acc": 97.84}}
        >>> PrintAccuracy().log_epoch(record, step=299)
        epoch 3: 97.8%
    """

    name = "logger"

    def start(self, history: list, resumed: bool, step) -> None:
        pass

    def log_params(self, params: dict) -> None:
        pass

    def log_metrics(self, scalars: dict, step: int) -> None:
        pass

    def log_epoch(self, record: dict, step: int) -> None:
        pass

    def log_text(self, name: str, text: str, step: int) -> None:
        pass

    def log_artifact(self, path: str) -> None:
        pass

    def close(self, failed: bool = False) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def numbers(values: dict) -> dict:
    """The numbers of a ``logs[phase]`` dict as floats, keeping nested dicts' structure."""
    out = {}
    for name, value in values.items():
        if isinstance(value, dict):
            nested = numbers(value)
            if nested:
                out[name] = nested
        elif isinstance(value, (int, float, torch.Tensor)) and not isinstance(value, bool):
            if not isinstance(value, torch.Tensor) or value.numel() == 1:
                out[name] = float(value)
    return out


def flatten(values: dict, prefix: str = "", separator: str = "/") -> dict:
    """``{"loss": {"cls": 1.0}}`` -> ``{"loss/cls": 1.0}``."""
    out = {}
    for name, value in values.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{name}{separator}", separator))
        else:
            out[f"{prefix}{name}"] = value
    return out


def epoch_scalars(record: dict) -> dict:
    """An epoch record as scalars: ``train/<name>``, ``test/<name>`` and ``lr``; once a target is reached, what
    it recorded too (``target/time_s``, ``target/step``, ``target/epoch``, ``target/samples``,
    ``target/reached_value``)."""
    scalars = {f"{phase}/{name}": value for phase in ("train", "test") for name, value in flatten(record[phase]).items()}
    scalars["lr"] = record["lr"]
    scalars.update({f"target/{name}": value for name, value in record.get("target", {}).items() if value is not None})
    return scalars


def flatten_params(config) -> dict:
    """A run's config as flat ``{"key.sub": "value"}`` strings, for a tracker's parameters.

    Nested dicts become dotted keys; every value is written with ``str`` (a list as
    ``[8, 12]``); private keys (``_name``) are left out.
    """
    items = config.items() if isinstance(config, dict) else vars(config).items()
    params = {}
    for key, value in flatten({k: v for k, v in items if not str(k).startswith("_")}, separator=".").items():
        params[key] = value if isinstance(value, str) else str(value)
    return params



def require(package: str, extra: str) -> None:
    """Checks that a logger's ``package`` is installed (without importing it: only the main
    process, which logs, pays for that); when it is missing, a one-line error naming the extra."""
    if importlib.util.find_spec(package) is None:
        raise ConfigError(f'the {extra} logger needs the {package} package: pip install "basetrainer[{extra}]"')
