"""MetricsRecorder: torchmetrics metrics of every evaluation, kept on the device and computed once across processes."""
import copy
import warnings

import torch

from ..callbacks.recording import phase_reduction
from ..distributed import comm
from ..engine.events import HIGH, Callback
from ..errors import ConfigError, one_line
from ..utils.log import RESULT, get_logger
from .metric_specs import build_metric, metric_parameters, metric_specs, torchmetrics_module


class MetricsRecorder(Callback):
    """Publishes torchmetrics metrics of each evaluation in ``logs["test"]``, for any trainer.

    ``metrics`` is a list (or one name) whose items are torchmetrics ``Metric`` objects, class names, or
    ``{name: {argument: value}}`` (read by :mod:`.metric_specs`: a name that is no metric, or an argument
    the metric does not take or refuses, is a one-line ConfigError); each metric's values go under its
    class name (``MulticlassF1Score``), as torchmetrics' ``MetricCollection`` names them. A dict of
    name -> item publishes under those names instead. ``num_classes`` is filled into the metrics built by
    name that take it; given, it also says that the model's outputs are logits of that many classes, and
    each metric is tried once on such logits and integer targets when the recorder is made: one the
    outputs cannot feed (a regression metric, a binary one on 10 classes, a curve) is refused there, in
    one line, before training.

    A value is a number (a float in ``logs``), or one per class (``average: none``), published as a
    group: ``logs["test"]["MulticlassAccuracy"]["cat"]``, read as ``MulticlassAccuracy/cat`` by
    ``target``, early stopping and the best-model choice (members named by ``target_names``, else by
    class index); a metric giving a dict publishes its entries the same way. :meth:`publishes` names them
    all, so that a ``target`` naming one is checked before training.

    Each test batch feeds the metrics ``outputs`` (the first item when a tuple or list) and the targets
    (``inputs[1]``, or ``inputs["label"]``); ``select(inputs, outputs) -> (preds, target)`` chooses
    otherwise. The batches are kept on the device as they come (references, no copy, no host sync); every
    ``fold_every`` batches (fewer when they hold over ``fold_elements`` values) they are concatenated
    and each metric updated once: a torchmetrics update costs far more than its work on one small batch
    and some read values back (CUDA's ``bincount``, argument checks), so that happens once a fold. The
    metrics built by name update without ``validate_args`` unless the config sets it (the try at
    construction checked the shapes; every batch's check is a host sync).

    ``on_test_end`` computes each metric once, its states gathered over the data-parallel processes when
    the test set is sharded (torchmetrics' sync, through :func:`gather_from_data_parallel_ranks`), so
    the values equal one process's on the same data, uneven shards included. The main process logs
    them in one line. The states live on the trainer's device and are reset at each ``on_test_begin``;
    an evaluation a stop signal cut short publishes nothing.
    """

    priority = HIGH

    def __init__(self, metrics, num_classes=None, target_names=None, select=None, fold_every: int = 128,
                 fold_elements: int = 2 ** 22, logger=None):
        super().__init__()
        self.num_classes = num_classes
        self.target_names = list(target_names) if target_names is not None else None
        self.select = select or _logits_and_targets
        self.fold_every, self.fold_elements = fold_every, fold_elements
        self.logger = logger or get_logger()
        self._update_checks_off = set()  # metrics built by name without validate_args: the probe checks for them
        self.metrics = self._build(metrics)
        self._published = {key: self._probe(key, metric) if num_classes is not None else [key]
                           for key, metric in self.metrics.items()}
        if num_classes is not None:  # the probe checked what the updates will get
            for key in self._update_checks_off:
                self.metrics[key].validate_args = False
        for metric in self.metrics.values():
            metric.dist_sync_fn = gather_from_data_parallel_ranks
        self._pending, self._fold_at, self._device = [], fold_every, None
        self._training = False

    def publishes(self):
        return tuple(name for names in self._published.values() for name in names)

    # ------------------------------------------------------------------ events
    def on_train_begin(self, logs=None):
        self._training = True

    def on_train_end(self, logs=None):
        self._training = False

    def on_test_begin(self, logs=None):
        trainer = self.trainer
        device = trainer.device if trainer is not None else torch.device("cpu")
        if device != self._device:
            for metric in self.metrics.values():
                metric.to(device)
            self._device = device
        self._reset()

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        preds, target = self.select(inputs, outputs)
        pending = self._pending
        if not pending:  # the fold's size in batches, from its first batch's size
            self._fold_at = max(1, min(self.fold_every, self.fold_elements // max(1, preds.numel())))
        pending.append((preds.detach(), target.detach()))
        if len(pending) >= self._fold_at:
            self._fold()

    def on_test_end(self, logs=None):
        if self.state is not None and self.state.evaluation_abandoned:
            self._reset()  # a stop signal cut the evaluation short: no partial values
            return
        reduce = phase_reduction(self, "test")
        if reduce is None:
            return  # no test loader: nothing was evaluated
        self._fold()
        values = {}
        for key, metric in self.metrics.items():
            metric.distributed_available_fn = _sharded if reduce else _one_shard
            with warnings.catch_warnings():  # a rank that saw no batch computes the gathered states all the same
                warnings.filterwarnings("ignore", message="The ``compute`` method of metric .* was called before")
                values.update(publishable(key, metric.compute(), self.target_names))
        self._published.update({key: [name for name in _names(values) if name == key or name.startswith(key + "/")]
                                for key in self.metrics})
        test = (logs if logs is not None else {}).setdefault("test", {})
        test.update(values)
        if comm.is_main_process():
            self.logger.info("test %s%s", " ".join(f"{name} {value:.4f}" for name, value in _flat(values)),
                             self._epoch_label(), extra=RESULT)

    # ------------------------------------------------------------------ helpers
    def _build(self, metrics) -> dict:
        """The metrics by the key they publish under (see the class docstring)."""
        metric_base = torchmetrics_module().Metric
        metrics = [metrics] if isinstance(metrics, str) else metrics
        named = metrics.items() if isinstance(metrics, dict) else ((None, item) for item in metrics)
        built = {}
        for key, item in named:
            if isinstance(item, metric_base):
                key = key or type(item).__name__
            else:
                spec = metric_specs([item])[0]
                key, item = key or spec.key, build_metric(spec, self.num_classes)
                if "validate_args" in metric_parameters(type(item)) and "validate_args" not in spec.arguments:
                    self._update_checks_off.add(key)
            if key in built:
                raise ConfigError(f"metric {key} is listed twice: give MetricsRecorder a dict to name each once")
            built[key] = item
        return built

    def _probe(self, key, metric) -> list:
        """Tries a copy of ``metric`` on logits of ``num_classes`` classes and integer targets, each class twice;
        returns the names it publishes, or refuses it in one line when those outputs cannot feed it."""
        probe = copy.deepcopy(metric)
        probe.distributed_available_fn = _one_shard
        classes = self.num_classes
        logits = torch.randn(2 * classes, classes, generator=torch.Generator().manual_seed(0))
        targets = torch.arange(2 * classes) % classes
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                probe.update(logits, targets)
                values = publishable(key, probe.compute(), self.target_names)
        except ConfigError:
            raise
        except Exception as error:  # torchmetrics refuses with ValueError, RuntimeError, TypeError...
            raise ConfigError(f"metric {key} cannot be computed from the model's outputs, logits of {classes} "
                              f"classes with integer class targets: {one_line(error)}") from None
        return _names(values)

    def _fold(self) -> None:
        if not self._pending:
            return
        preds = torch.cat([item[0] for item in self._pending])
        target = torch.cat([item[1] for item in self._pending])
        self._pending = []
        for metric in self.metrics.values():
            metric.update(preds, target)

    def _reset(self) -> None:
        self._pending = []
        for metric in self.metrics.values():
            metric.reset()

    def _epoch_label(self) -> str:
        state = self.state
        return f" (epoch {state.epoch + 1})" if self._training and state is not None else ""


def gather_from_data_parallel_ranks(tensor: torch.Tensor, group=None) -> list:
    """torchmetrics' ``dist_sync_fn`` for the recorder: every data-parallel rank's ``tensor``, in rank order,
    on this tensor's device.

    The engine's gather (:func:`~basetrainer.distributed.comm.all_gather`) rather than torchmetrics'
    ``gather_all_tensors``: it runs over the data-parallel group of a device mesh (``group``, torchmetrics'
    world, is not that), takes tensors of any shape from each rank (one rank's share of an exact, unpadded
    test set is shorter) and moves CUDA tensors through the host, which gloo needs. A rank that saw no
    batch sends torchmetrics' empty placeholder (1-D float) for a state of concatenated values; it is left
    out where other ranks have values, so that it changes neither their shape nor their dtype.
    """
    gathered = [item.to(tensor.device) for item in comm.all_gather(tensor.detach().cpu(), data_parallel=True)]
    return [item for item in gathered if item.numel()] or gathered


def publishable(key: str, value, member_names=None) -> dict:
    """``{key: float}`` for a one-number value, ``{key: {member: float}}`` for one value per class (members named
    by ``member_names`` when there are as many, else by index) or a dict of numbers; a ConfigError otherwise."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return {key: float(value)}
    if isinstance(value, torch.Tensor) and value.dim() == 1:
        names = member_names if member_names is not None and len(member_names) == len(value) else range(len(value))
        return {key: {str(name): float(item) for name, item in zip(names, value.tolist())}}
    if isinstance(value, dict) and all(isinstance(item, torch.Tensor) and item.numel() == 1 for item in value.values()):
        return {key: {str(name): float(item) for name, item in value.items()}}
    shape = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
    raise ConfigError(f"metric {key} gives {shape}; a recorder publishes numbers and one number per class (for a "
                      f"confusion matrix, AccuracyRecorder writes one)")


def _flat(values: dict):
    for name, value in values.items():
        if isinstance(value, dict):
            yield from ((f"{name}/{member}", item) for member, item in value.items())
        else:
            yield name, value


def _names(values: dict) -> list:
    return [name for name, _ in _flat(values)]


def _logits_and_targets(inputs, outputs):
    preds = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
    return preds, inputs["label"] if isinstance(inputs, dict) else inputs[1]


def _sharded() -> bool:
    """torchmetrics' ``distributed_available_fn`` when each rank saw different samples: sync the states."""
    return True


def _one_shard() -> bool:
    """The same when every rank saw the whole test set, or one process runs: no sync."""
    return False
