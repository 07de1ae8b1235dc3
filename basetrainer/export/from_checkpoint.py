"""Rebuilding the image classifier of a run from any model file the classification task writes.

- ``last.pth``, the full training state, or ``last/``, the same sharded (FSDP; read here in one
  process, its shards joined): its ``config`` names the network, a pruned model's
  widths are under ``architecture``, and an EMA callback's average (in ``callbacks``, as
  ``{"averaged": weights, "updates": n}``) is preferred to the training weights.
- ``best_model_*.pth`` and ``model_final.pth``, weights only (already the EMA average when
  EMA was on): the network is named by the config of the ``last.pth`` (or ``last/``) beside them, else by
  the run's ``config.yaml`` beside the ``model/`` folder; a pruned model's widths are in
  the best models themselves, and for ``model_final.pth`` in that ``last.pth``.
- the earlier library's files (which ``ModelCheckpoint(moder_dir=...)`` also writes beside
  ``last.pth``): ``best_model_*``, ``latest_model_*`` and ``model_<epoch>_*.pth`` (bare
  state_dicts), and ``model_optimizer.pth``, whose ``model`` holds the training weights. In
  a run of the earlier library itself the network is named by the ``setup_config.yaml`` its
  example saved beside ``model/``; that config has no ``num_classes`` (the data gave it), so it
  is read off the weights: the rows of the last layer's weight.
"""
import os
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..checkpoint.files import load_checkpoint
from ..checkpoint.discovery import is_sharded_checkpoint
from ..checkpoint.sharded import consolidated_weights, read_loop_state
from ..checkpoint.weights import check_shapes, extract_model_state, is_model_and_optimizer_file
from ..config import load_config
from ..errors import CheckpointError, ConfigError
from ..models.build_models import get_models
from ..models.settings import MODEL_SETTINGS
from ..pruning.architecture import apply_architecture_spec

# The run's config beside model/: ours, then the one the earlier library's example saved.
CONFIG_NAMES = ("config.yaml", "setup_config.yaml")


@dataclass
class LoadedModel:
    """A rebuilt classifier in eval mode, its input size, which weights it holds (in words) and its run's config."""

    model: nn.Module
    input_size: list  # [width, height]
    weights: str
    config: dict

    def example_input(self, batch_size: int = 1) -> torch.Tensor:
        """A random batch of images of the size the model was trained on."""
        width, height = self.input_size
        return torch.randn(batch_size, 3, height, width)


@dataclass
class SavedModel:
    """What a model file of a run holds, read as the module docstring says: the weights to export, what they are (in
    words), the run's config and a pruned model's architecture (None: unpruned)."""

    path: str
    weights: dict
    description: str
    config: dict
    architecture: Optional[dict]

    @property
    def is_detector(self) -> bool:
        """Whether the detection task saved it (whose config has keys the classification task's has not)."""
        return "train_annotations" in self.config


def read_saved_model(path: str) -> SavedModel:
    """The weights and the run's config of the model file ``path`` (see the module docstring), for any task."""
    state = _read(path)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds no model weights (a {type(state).__name__}, not a dict)")
    run_state = state if isinstance(state.get("config"), dict) else _last_beside(path)
    cfg = dict(_run_config(path, run_state))
    weights, description = _weights(path, state, cfg)
    return SavedModel(path, weights, description, cfg,
                      state.get("architecture") or (run_state or {}).get("architecture"))


def model_from_checkpoint(path: str) -> LoadedModel:
    """The classifier saved in ``path`` (see the module docstring), on the CPU, in eval mode."""
    return classifier_from_saved(read_saved_model(path))


def classifier_from_saved(saved: SavedModel) -> LoadedModel:
    """The classifier of ``saved`` (:func:`read_saved_model`), on the CPU, in eval mode."""
    path, cfg, weights = saved.path, dict(saved.config), saved.weights
    if not cfg.get("num_classes"):  # the earlier library saved its config before the data named the classes
        cfg["num_classes"] = _classifier_rows(weights)
    _check_model_keys(saved, cfg)
    model = get_models(cfg["net_type"], input_size=cfg["input_size"], num_classes=cfg["num_classes"],
                       width_mult=cfg.get("width_mult", 1.0), pretrained=False)
    if saved.architecture:
        apply_architecture_spec(model, saved.architecture)
    check_shapes(model, weights, path)
    model.load_state_dict(weights)
    return LoadedModel(model.eval(), list(cfg["input_size"]), saved.description, cfg)


def _check_model_keys(saved: SavedModel, cfg: dict) -> None:
    """The saved config names the network as the classification task does, with values its keys accept."""
    path = saved.path
    if saved.is_detector:
        raise CheckpointError(f"{path} holds a detector (net_type {cfg.get('net_type')}, from the detection task): "
                              f"this rebuilds image classifiers; write its boxes with basetrainer predict --task "
                              f"detection, or export it with basetrainer export {path} --out model.onnx")
    missing = [key for key in ("net_type", "input_size", "num_classes") if cfg.get(key) is None]
    if missing:
        raise CheckpointError(f"the config of {path} has no {', '.join(missing)}: it was not written by the "
                              f"classification task; rebuild the model in code and call export_model")
    try:
        MODEL_SETTINGS.check({key: cfg[key] for key in ("net_type", "input_size", "num_classes", "width_mult")
                              if key in cfg}, f"in the config saved with {path}")
    except ConfigError as error:
        raise CheckpointError(str(error)) from None


def _read(path: str):
    if is_sharded_checkpoint(path):
        return {**read_loop_state(path), "model": consolidated_weights(path)}
    return load_checkpoint(path)


def _last_beside(path: str):
    """The training state in the ``last.pth`` (or sharded ``last/``) beside a weights-only file, or None."""
    last = os.path.join(os.path.dirname(os.path.abspath(path)), "last.pth")
    if is_sharded_checkpoint(last[: -len(".pth")]):
        return read_loop_state(last[: -len(".pth")])
    return load_checkpoint(last) if os.path.isfile(last) else None


def _run_config(path: str, run_state) -> dict:
    if run_state is not None and isinstance(run_state.get("config"), dict):
        return run_state["config"]
    work_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    for name in CONFIG_NAMES:
        if os.path.isfile(os.path.join(work_dir, name)):
            return load_config(os.path.join(work_dir, name))
    raise CheckpointError(f"{path} holds weights only, and there is neither a last.pth beside it nor a "
                          f"{' or '.join(CONFIG_NAMES)} in {work_dir} to name the network; export from the run's "
                          f"last.pth")


def _classifier_rows(weights: dict):
    """The outputs of the last layer, a torchvision classifier's head: the rows of the last 2-D weight."""
    matrices = [value for value in weights.values() if value.ndim == 2]
    return int(matrices[-1].shape[0]) if matrices else None


def _weights(path: str, state, cfg) -> tuple:
    """The weights to export and what they are, in words."""
    name = os.path.basename(path)
    for callback_state in (state.get("callbacks") or {}).values():
        if isinstance(callback_state, dict) and isinstance(callback_state.get("averaged"), dict):
            updates = callback_state.get("updates", 0)
            return (extract_model_state(callback_state["averaged"]),
                    f"the EMA average of the weights ({updates} updates) from {name}")
    weights = extract_model_state(state)
    if is_model_and_optimizer_file(state):
        return weights, f"the training weights from {name} (the earlier library's model and optimizer file)"
    if "callbacks" in state:
        return weights, f"the training weights from {name} (the run kept no EMA average)"
    if float(cfg.get("ema_decay") or 0) > 0:
        return weights, f"the weights in {name} (the EMA average: EMA was on in that run)"
    return weights, f"the weights in {name}"
