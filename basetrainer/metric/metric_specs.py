"""torchmetrics metrics named in a config: ``metrics: [MulticlassAccuracy, {MulticlassF1Score: {average: macro}}]``.

Each item names a :class:`torchmetrics.Metric` by its class name, alone or as a one-entry mapping to its
arguments. :func:`metric_spec` reads one item before any work: the name must be a metric of
torchmetrics (of ``torchmetrics``, ``.classification``, ``.regression``, ``.aggregation``; an unknown one
is refused naming the close matches) and each argument one of the metric's own parameters (the
keyword arguments of torchmetrics' ``Metric`` base, which say how states sync and where they live, are
the recorder's business). :func:`build_metric` then makes the metric, with ``num_classes`` filled in
where it takes it and is not given; an argument value the metric refuses is refused there, in one line.

A metric's values go in ``logs["test"]`` under its class name as written here, as torchmetrics'
``MetricCollection`` names them (``MulticlassF1Score``); the same name twice is refused.

torchmetrics is an extra (``pip install "basetrainer[metrics]"``), imported only when a metric is named.
"""
import difflib
import functools
import importlib
import importlib.util
import inspect
from dataclasses import dataclass, field

from ..config.kinds import Invalid, Named, shown
from ..errors import ConfigError, one_line

METRICS_EXTRA = 'pip install "basetrainer[metrics]"'
# Where torchmetrics keeps the metrics a classifier or a regressor is scored with (the top level re-exports
# most; the task-specific classification ones, MulticlassAccuracy..., live in .classification only).
METRIC_MODULES = ("torchmetrics", "torchmetrics.classification", "torchmetrics.regression", "torchmetrics.aggregation")
# Metric's own keyword arguments: how states sync and where they are kept, which the recorder decides.
BASE_ARGUMENTS = ("compute_on_cpu", "dist_sync_on_step", "process_group", "dist_sync_fn", "distributed_available_fn",
                  "sync_on_compute", "compute_with_cache")


@dataclass(frozen=True)
class MetricSpec:
    """One metric as a config names it: the torchmetrics class ``name``, its ``arguments``, and ``key``, the
    name its values are published under."""

    name: str
    arguments: dict = field(default_factory=dict)
    key: str = ""

    def as_config(self):
        """The config item: the name alone, or ``{name: arguments}``."""
        return {self.name: dict(self.arguments)} if self.arguments else self.name


def torchmetrics_module(name: str = "torchmetrics"):
    """Imports a torchmetrics module; a one-line ConfigError naming the pip command when torchmetrics is missing."""
    if importlib.util.find_spec("torchmetrics") is None:
        raise ConfigError(f"metrics need the torchmetrics package: {METRICS_EXTRA}")
    return importlib.import_module(name)


def metric_classes() -> dict:
    """Every metric class of ``METRIC_MODULES``, by class name; a one-line ConfigError without torchmetrics."""
    torchmetrics_module()
    return _metric_classes()


@functools.lru_cache(maxsize=None)
def _metric_classes() -> dict:
    """:func:`metric_classes`, read once: a few hundred names."""
    metric_base = torchmetrics_module().Metric
    classes = {}
    for module_name in METRIC_MODULES:
        module = torchmetrics_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name, None)
            if isinstance(value, type) and issubclass(value, metric_base) and value is not metric_base:
                classes.setdefault(name, value)
    return classes


def metric_spec(item) -> MetricSpec:
    """The :class:`MetricSpec` of one config item (a name, or ``{name: {argument: value}}``); a one-line
    ConfigError for an unknown name (with the close matches) or an argument the metric does not take."""
    if isinstance(item, str):
        name, arguments = item, {}
    elif isinstance(item, dict) and len(item) == 1 and isinstance(next(iter(item)), str):
        name, arguments = next(iter(item.items()))
    else:
        raise ConfigError(f"a metric is a torchmetrics class name or a mapping of one name to its arguments "
                          f"({{MulticlassF1Score: {{average: macro}}}}), got {shown(item)}")
    classes = metric_classes()
    name = _known_name(name.strip(), classes)
    arguments = {} if arguments is None else arguments
    if not isinstance(arguments, dict) or not all(isinstance(key, str) for key in arguments):
        raise ConfigError(f"metric {name}: its arguments are a mapping of argument names to values, "
                          f"got {shown(arguments)}")
    parameters = metric_parameters(classes[name])
    for argument in arguments:
        if argument not in parameters:
            close = difflib.get_close_matches(argument, parameters, n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else f"; it takes {', '.join(parameters)}"
            reserved = " (the recorder decides how states sync and where they live)" if argument in BASE_ARGUMENTS \
                else ""
            raise ConfigError(f"metric {name} takes no argument {argument!r}{reserved}{hint}")
    return MetricSpec(name, dict(arguments), key=name)


def metric_specs(items) -> list:
    """The :class:`MetricSpec` of each item (see :func:`metric_spec`); the same key twice is refused."""
    specs = [metric_spec(item) for item in items]
    _refuse_repeats(specs)
    return specs


def _refuse_repeats(specs) -> None:
    keys = [spec.key for spec in specs]
    repeated = next((key for key in keys if keys.count(key) > 1), None)
    if repeated:
        raise ConfigError(f"metric {repeated} is listed twice: its values are published under its class name, so "
                          f"list each metric once (a trainer of your own can name them: MetricsRecorder({{name: "
                          f"metric}}))")


def metric_parameters(cls) -> list:
    """The named parameters of a metric class (a task wrapper's, such as ``Accuracy``'s, are its ``__new__``'s)."""
    constructor = cls.__new__ if "__new__" in vars(cls) else cls.__init__
    return [name for name, parameter in inspect.signature(constructor).parameters.items()
            if name not in ("self", "cls") and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)]


def build_metric(spec: MetricSpec, num_classes=None, **base_arguments):
    """The torchmetrics metric of ``spec``, with ``num_classes`` where it takes it and the config does not give
    it; ``base_arguments`` go to torchmetrics' ``Metric``. An argument value the metric refuses is a one-line
    ConfigError (torchmetrics checks them when ``validate_args``, its default, is on)."""
    cls = metric_classes()[spec.name]
    arguments = dict(spec.arguments)
    if "num_classes" in metric_parameters(cls) and "num_classes" not in arguments and num_classes is not None:
        arguments["num_classes"] = num_classes
    try:
        return cls(**arguments, **base_arguments)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"metric {spec.key}: {one_line(error)}") from None


def _known_name(name: str, classes: dict) -> str:
    """``name`` as torchmetrics spells it (case aside); a ConfigError naming the close matches otherwise."""
    if name in classes:
        return name
    by_lower = {known.lower(): known for known in classes}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    close = difflib.get_close_matches(name, list(classes), n=4, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see torchmetrics' list of metrics"
    raise ConfigError(f"unknown torchmetrics metric {name!r}{hint}")


class MetricList(Named):
    """The kind of the ``metrics`` config key: a list of metric items (see :func:`metric_spec`; one name alone is
    a list of it), checked into their canonical form (torchmetrics' spelling of each name). A refusal reads
    ``config key 'metrics': item 1: unknown torchmetrics metric 'F1'; did you mean ...``."""

    def __init__(self):
        super().__init__(metric_spec, "a list of torchmetrics metrics, each a class name or {name: {argument: "
                                      "value}} (one name alone: a list of it)")

    def check(self, value):
        if isinstance(value, str):
            value = [value]  # metrics=MulticlassAccuracy on a command line
        if not isinstance(value, (list, tuple)):
            raise Invalid(f"expected a list of torchmetrics metrics, got {shown(value)}")
        specs = []
        for index, item in enumerate(value):
            try:
                specs.append(metric_spec(item))
            except ConfigError as error:
                raise Invalid(f"item {index}: {error}") from None
        try:
            _refuse_repeats(specs)
        except ConfigError as error:
            raise Invalid(str(error)) from None
        return [spec.as_config() for spec in specs]
