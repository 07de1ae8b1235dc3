"""``model_pruning``: make a built model smaller and faster before it is fine-tuned."""
import json
import logging
import os

import torch
from torch import nn

from ..distributed import comm
from ..errors import BaseTrainerError, ConfigError
from ..utils.log import get_logger
from .architecture import apply_architecture_spec, architecture_spec
from .report import example_input_shape, format_report, profile_model, pruning_report

STRUCTURED_MODES = ("L1", "L2", "FPGM", "Slim")
PRUNE_MODES = STRUCTURED_MODES + ("Level",)
BACKENDS = ("torch-pruning", "nni")

REPORT_FILE = "prune_report.json"
RECORD_FILE = "prune_record.pth"


def model_pruning(
    model: nn.Module,
    input_size,
    sparsity: float,
    prune_mod: str = "L1",
    reuse: bool = False,
    output_prune=None,
    backend: str = "torch-pruning",
    ignored_layers=None,
    logger: logging.Logger = None,
) -> nn.Module:
    """Removes channels from ``model`` in place and returns it, ready to fine-tune.

    - ``input_size``: the example input's shape ``[1, C, H, W]`` (or ``[W, H]``, 3 channels).
    - ``sparsity``: the fraction of each layer's channels to remove; 0.5 keeps half the
      channels, which leaves about a quarter of the parameters.
    - ``prune_mod``: how channels are ranked: ``L1``/``L2`` (norm of their weights),
      ``FPGM`` (closeness to the geometric median), ``Slim`` (the BatchNorm scale's magnitude; train
      with :func:`~basetrainer.pruning.slim.bn_l1_penalty` first). ``Level`` zeroes single weights instead and gives
      no speed-up.
    - ``output_prune``: a folder for ``prune_report.json`` (params, MACs, CPU latency
      before and after, every layer's width) and for the record that ``reuse=True`` replays
      to remove the same channels again.
    - ``ignored_layers``: modules or names whose output width is kept; by default the
      final classifier, so the model still predicts every class.

    Under several processes rank 0 prunes and every other rank takes its architecture
    and weights, so all ranks hold the same model before DDP wraps it. Build the
    optimizer after pruning: the pruned parameters are new tensors. The returned model
    carries ``pruning_spec`` (see :mod:`basetrainer.pruning.architecture`) for checkpoints
    and ``pruning_report`` (the dict written to ``prune_report.json``).
    """
    logger = logger or get_logger()
    mode = prune_mode_name(prune_mod)
    if backend not in BACKENDS:
        raise ConfigError(f"unknown pruning backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if not 0.0 < float(sparsity) < 1.0:
        raise ConfigError(f"prune_sparsity must be between 0 and 1 (exclusive), got {sparsity}")
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        raise ConfigError("prune the model before build_model_parallel wraps it: DDP cannot follow changing shapes")
    if mode == "Slim" and not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        raise ConfigError("prune_mod Slim ranks channels by their BatchNorm scale, but the model has no BatchNorm: use L1, L2 or FPGM")
    shape = example_input_shape(input_size)
    # Every rank checks the backend, so a missing one stops all ranks at once instead of
    # leaving the others waiting for rank 0's result.
    _check_backend(backend, mode)

    result, failure = None, None
    if comm.is_main_process():
        try:
            result = _prune_here(model, shape, float(sparsity), mode, backend, ignored_layers, reuse, output_prune, logger)
        except Exception as error:  # the other ranks are waiting for the result: let them stop too
            failure = error
    result = comm.broadcast_object(result)
    if failure is not None:
        raise failure
    if result is None:
        raise BaseTrainerError("pruning failed on the main process (rank 0); its log says why")
    if not comm.is_main_process():
        apply_architecture_spec(model, result["spec"])
    _share_weights(model)
    model.pruning_spec = result["spec"]
    model.pruning_report = result["report"]
    return model


def default_ignored_layers(model: nn.Module, example_input: torch.Tensor) -> list:
    """The final classifier: the last convolution or linear layer to run, and every linear
    layer as wide as the model's output (auxiliary classifiers)."""
    called = []
    hooks = [
        module.register_forward_hook(lambda module, inputs, output: called.append(module))
        for module in model.modules()
        if isinstance(module, (nn.modules.conv._ConvNd, nn.Linear))
    ]
    try:
        with torch.no_grad():
            output = model(example_input)
    finally:
        for hook in hooks:
            hook.remove()
    ignored = called[-1:]
    if isinstance(output, torch.Tensor) and output.dim() >= 2:
        num_classes = output.shape[1]
        ignored += [m for m in model.modules() if isinstance(m, nn.Linear) and m.out_features == num_classes]
    return list(dict.fromkeys(ignored))


def _prune_here(model, shape, sparsity, mode, backend, ignored_layers, reuse, output_prune, logger) -> dict:
    """Prunes in this process; returns the spec and report that the other ranks receive."""
    was_training = model.training
    # Tracing and profiling run forward passes; in train mode they would shift BN statistics.
    model.eval()
    try:
        example_input = torch.randn(shape, device=_device_of(model))
        spec_before, before = architecture_spec(model), profile_model(model, shape)
        if ignored_layers is None:
            ignored = default_ignored_layers(model, example_input)
        else:
            ignored = _resolve_layers(model, ignored_layers)
        record = _load_record(output_prune, backend, mode, sparsity, logger) if reuse else None
        if mode == "Level":
            logger.warning(
                "Level pruning zeroes weights but keeps every channel: the model gets no smaller and no faster "
                "(prune_mod L1, L2, FPGM or Slim remove channels)"
            )
        if backend == "nni":
            from .nni_backend import prune_with_nni

            names = {module: name for name, module in model.named_modules()}
            record = prune_with_nni(model, example_input, sparsity, mode, [names[m] for m in ignored], record)
        elif mode == "Level":
            from .torch_pruning_backend import prune_weights

            prune_weights(model, sparsity, ignored)
        else:
            from .torch_pruning_backend import prune_channels

            record = prune_channels(model, example_input, sparsity, mode, ignored, record)
        spec_after, after = architecture_spec(model), profile_model(model, shape)
    finally:
        model.train(was_training)

    if mode != "Level" and spec_after == spec_before:
        logger.warning("pruning removed no channels: every prunable layer is ignored or too narrow to prune")
    ignored = set(ignored)
    report = pruning_report(
        before, after, spec_before, spec_after,
        backend=backend, prune_mod=mode, sparsity=sparsity, input_shape=shape,
        ignored_layers=[name for name, module in model.named_modules() if module in ignored],
    )
    logger.info(format_report(report))
    if output_prune:
        os.makedirs(output_prune, exist_ok=True)
        with open(os.path.join(output_prune, REPORT_FILE), "w") as f:
            json.dump(report, f, indent=2)
        if record is not None:
            torch.save(
                {"backend": backend, "prune_mod": mode, "sparsity": sparsity, "record": record},
                os.path.join(output_prune, RECORD_FILE),
            )
    return {"spec": spec_after, "report": report}


def _load_record(output_prune, backend, mode, sparsity, logger):
    """The saved record of an earlier pruning with the same settings, if there is one."""
    path = os.path.join(output_prune, RECORD_FILE) if output_prune else None
    if path is None or not os.path.exists(path):
        logger.info("reuse: no earlier pruning saved in %s, pruning afresh", output_prune)
        return None
    saved = torch.load(path, map_location="cpu", weights_only=True)
    if (saved["backend"], saved["prune_mod"], saved["sparsity"]) != (backend, mode, sparsity):
        logger.warning(
            "reuse: %s was made with %s %s sparsity %s, not %s %s sparsity %s; pruning afresh",
            path, saved["backend"], saved["prune_mod"], saved["sparsity"], backend, mode, sparsity,
        )
        return None
    logger.info("reuse: applying the pruning recorded in %s", path)
    return saved["record"]


def _share_weights(model: nn.Module) -> None:
    """Gives every rank rank 0's pruned weights (their shapes already agree)."""
    if comm.get_world_size() == 1:
        return
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()} if comm.is_main_process() else None
    state = comm.broadcast_object(state)
    if not comm.is_main_process():
        model.load_state_dict(state)


def _check_backend(backend: str, mode: str) -> None:
    if backend == "nni":
        from .nni_backend import import_nni

        import_nni()
    elif mode != "Level":
        from .torch_pruning_backend import import_torch_pruning

        import_torch_pruning()


def prune_mode_name(prune_mod: str) -> str:
    """The mode of PRUNE_MODES ``prune_mod`` names (any case); a ConfigError listing them when none."""
    for mode in PRUNE_MODES:
        if str(prune_mod).lower() == mode.lower():
            return mode
    raise ConfigError(f"unknown prune_mod {prune_mod!r}: use one of {', '.join(PRUNE_MODES)}")


def _resolve_layers(model: nn.Module, layers) -> list:
    modules = dict(model.named_modules())
    resolved = []
    for layer in layers:
        if isinstance(layer, str):
            if layer not in modules:
                raise ConfigError(f"ignored layer {layer!r} is not in the model: use names from model.named_modules()")
            layer = modules[layer]
        resolved.append(layer)
    return resolved


def _device_of(model: nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")
