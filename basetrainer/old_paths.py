"""Every import path that is not where its code lives now: the earlier library's, and earlier releases'.

One table, read by an import hook that ``import basetrainer`` installs. Four kinds of entry:

- ``MOVED``: the old module *is* the new one (the same module object, so patching either
  path patches both): ``basetrainer.engine.comm`` is :mod:`basetrainer.distributed.comm`.
  A moved package takes its submodules along (``basetrainer.engine.strategies.fsdp``).
- ``NAMES``: the old module held a few names that now live with their owners, some under
  new names (``basetrainer.engine.engine.Engine`` is ``EngineTrainer``); ``REMOVED_NAMES``
  are names of such a module whose job basetrainer does not do.
- ``REMOVED``: modules whose job basetrainer does not do: importing one raises ImportError
  with one line naming what to use instead.
- ``PACKAGES``: old packages that hold only old modules.

Importing a moved or renamed path warns once with a ``DeprecationWarning`` naming the new
path; old scripts keep running unchanged (``tests/compat`` runs them).
"""
import importlib
import importlib.abc
import importlib.util
import sys
import warnings

_ONNX = "export ONNX (basetrainer export --format onnx) and run it with basetrainer.export.onnx_engine.ONNXEngine"
_CONVERT = "export ONNX (basetrainer export --format onnx, or basetrainer.export.export_model) and convert it with "

MOVED = {
    "basetrainer.engine.comm": "basetrainer.distributed.comm",
    "basetrainer.engine.process_group": "basetrainer.distributed.process_group",
    "basetrainer.engine.launch": "basetrainer.distributed.launch",
    "basetrainer.engine.signals": "basetrainer.distributed.signals",
    "basetrainer.engine.watchdog": "basetrainer.distributed.watchdog",
    "basetrainer.engine.strategies": "basetrainer.parallel",
    "basetrainer.engine.checkpoint": "basetrainer.checkpoint",
    "basetrainer.engine.sharded_checkpoint": "basetrainer.checkpoint.sharded",
    "basetrainer.engine.safe_dcp": "basetrainer.checkpoint.safe_dcp",
    "basetrainer.engine.data": "basetrainer.data",
    "basetrainer.engine.batch": "basetrainer.utils.batch",
    "basetrainer.callbacks.callbacks": "basetrainer.engine.events",
    "basetrainer.callbacks.progress_bar": "basetrainer.engine.progress",
    "basetrainer.utils.setup_config": "basetrainer.config.legacy",
    "basetrainer.pruning.nni_pruning": "basetrainer.pruning",
    # The classification task's files, now in one folder as the other tasks' are, and what every task shares.
    "basetrainer.tasks.classification_config": "basetrainer.tasks.classification.config",
    "basetrainer.tasks.classification_settings": "basetrainer.tasks.classification.settings",
    "basetrainer.tasks.predict": "basetrainer.tasks.classification.predict",
    "basetrainer.tasks.command_line": "basetrainer.tasks.common.command_line",
    "basetrainer.tasks.startup": "basetrainer.tasks.common.startup",
}

NAMES = {
    "basetrainer.engine.engine": {"Engine": "basetrainer.engine.trainer:EngineTrainer"},
    "basetrainer.engine.base": {"Base": "basetrainer.engine.events:Callback"},
    "basetrainer.engine.onnx_engine": {"ONNXEngine": "basetrainer.export.onnx_engine:ONNXEngine",
                                       "simplify_onnx": "basetrainer.export.onnx_engine:simplify_onnx"},
    "basetrainer.utils.plot_utils": {"plot_multi_line": "basetrainer.utils.plots:plot_multi_line"},
    "basetrainer.utils.torch_tools": {"set_env_random_seed": "basetrainer.utils.seeding:set_env_random_seed",
                                      "load_state_dict": "basetrainer.checkpoint.weights:read_model_weights"},
    "basetrainer.utils.torch_data": {"build_dataloader": "basetrainer.data.legacy:build_dataloader"},
    "basetrainer.utils.converter.pytorch2onnx": {"convert2onnx": "basetrainer.export.legacy:convert2onnx"},
    "basetrainer.scheduler.MultiStepLR": {"MultiStepLR": "basetrainer.scheduler.legacy:MultiStepLR"},
    "basetrainer.scheduler.CosineAnnealingLR": {"CosineAnnealingLR": "basetrainer.scheduler.legacy:CosineAnnealingLR",
                                                "CosineLR": "basetrainer.scheduler.legacy:CosineAnnealingLR"},
    "basetrainer.scheduler.ExponentialLR": {"ExponentialLR": "basetrainer.scheduler.legacy:ExponentialLR"},
    "basetrainer.scheduler.LambdaLR": {"LambdaLR": "basetrainer.scheduler.legacy:LambdaLR"},
    "basetrainer.scheduler.WarmUpLR": {"WarmUpLR": "basetrainer.scheduler.legacy:WarmUpLR"},
}

_FP16 = "fp16 conversion is not supported; use onnxconverter_common.float16.convert_float_to_float16"
REMOVED_NAMES = {
    "basetrainer.engine.onnx_engine": {"onnx_fp16": _FP16, "fix_onnx_fp16": _FP16,
                                       "print_tensor": "print the output arrays with numpy"},
    "basetrainer.utils.plot_utils": dict.fromkeys(("plot_bar", "plot_skew_kurt", "demo", "demo_for_skew_kurt"),
                                                  "draw it with matplotlib.pyplot"),
    "basetrainer.utils.torch_data": {
        "Collation": "torch's default collate stacks tensors of tuple and dict samples; for samples of varying "
                     "size pass your own collate_fn to build_dataloader",
        "build_model_parallel": "call self.build_model_parallel(model, device_ids) in your trainer's build_model",
    },
}

REMOVED = {
    "basetrainer.scheduler.MultiStepValue": "basetrainer schedules learning rates only "
                                            "(basetrainer.scheduler.get_scheduler); for another value per epoch "
                                            "use values[bisect.bisect_right(milestones, epoch)]",
    "basetrainer.utils.summary": "LogHistory writes TensorBoard on the main process; for scalars of your own use "
                                 "torch.utils.tensorboard.SummaryWriter(log_dir) where "
                                 "basetrainer.distributed.comm.is_main_process()",
    "basetrainer.dataloader.data_resample": "basetrainer does not resample classes; draw balanced batches with "
                                            "torch.utils.data.WeightedRandomSampler (weight 1/class count) in your "
                                            "own DataLoader, or weight the loss with get_criterion(..., "
                                            "class_weight=...)",
    "basetrainer.engine.trt_engine": f"TensorRT inference is not supported; {_ONNX} (onnxruntime)",
    "basetrainer.engine.trt_calibrator": f"TensorRT calibration is not supported; {_ONNX} (onnxruntime)",
    "basetrainer.engine.mnn_engine": f"MNN inference is not supported; {_ONNX} (onnxruntime)",
    "basetrainer.engine.ncnn_engine": f"ncnn inference is not supported; {_ONNX} (onnxruntime)",
    "basetrainer.engine.rknn_engine": f"RKNN inference is not supported; {_ONNX} (onnxruntime)",
    "basetrainer.utils.converter.onnx2trt": f"conversion to TensorRT is not supported; {_CONVERT}TensorRT's own tools",
    "basetrainer.utils.converter.onnx2mnn": f"conversion to MNN is not supported; {_CONVERT}MNN's own tools",
    "basetrainer.utils.converter.onnx2ncnn": f"conversion to ncnn is not supported; {_CONVERT}ncnn's own tools",
    "basetrainer.utils.converter.pytorch2ncnn": f"conversion to ncnn is not supported; {_CONVERT}ncnn's own tools",
}

PACKAGES = {
    "basetrainer.dataloader": "the earlier library's data loading helpers (see basetrainer.data)",
    "basetrainer.utils.converter": "the earlier library's model converters (see basetrainer.export)",
}


def new_path(old: str):
    """Where the module ``old`` lives now (a module name), or None when ``old`` is not a moved path."""
    for prefix, target in MOVED.items():
        if old == prefix or old.startswith(prefix + "."):
            return target + old[len(prefix):]
    return None


class OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the modules of the table above (ahead of the file system, so that a moved package's
    submodules are the new ones, not second copies) and loads each as its kind says."""

    def __init__(self):
        self._specs = {}  # old path -> the spec of the module it now is, while that module loads

    def find_spec(self, fullname, path=None, target=None):
        if fullname in REMOVED:
            raise ImportError(f"{fullname} was removed: {REMOVED[fullname]}", name=fullname)
        if new_path(fullname) or fullname in NAMES or fullname in PACKAGES:
            return importlib.util.spec_from_loader(fullname, self, is_package=fullname in PACKAGES)
        return None

    def create_module(self, spec):
        target = new_path(spec.name)
        if target is None:
            return None  # a new module, filled by exec_module
        module = importlib.import_module(target)
        self._specs[spec.name] = module.__spec__  # the import system sets __spec__ to the old path's: put it back
        return module

    def exec_module(self, module):
        old = module.__spec__.name
        if old in self._specs:
            module.__spec__ = self._specs.pop(old)
            _warn(old, module.__name__)
        elif old in PACKAGES:
            module.__doc__ = f"Old package: {PACKAGES[old]}."
        else:
            for name, where in NAMES[old].items():
                owner, attribute = where.split(":")
                setattr(module, name, getattr(importlib.import_module(owner), attribute))
            module.__doc__ = f"Old path of {', '.join(NAMES[old].values())}."
            module.__getattr__ = _removed_names(old)
            _warn(old, ", ".join(dict.fromkeys(where.replace(":", ".") for where in NAMES[old].values())))


def _removed_names(module_name):
    removed = REMOVED_NAMES.get(module_name, {})

    def __getattr__(name):
        if name in removed:
            raise ImportError(f"{module_name}.{name} was removed: {removed[name]}")
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__


def _warn(old: str, new: str) -> None:
    """A DeprecationWarning attributed to the line that imported ``old``: past this module's frames and
    the import system's (``warnings`` skips importlib's bootstrap frames itself; the others are counted)."""
    frame, level = sys._getframe(1), 2
    while frame is not None and _in_import_system(frame):
        if not _bootstrap(frame):
            level += 1
        frame = frame.f_back
    warnings.warn(f"{old} is an old import path: import {new} instead", DeprecationWarning, stacklevel=level)


def _bootstrap(frame) -> bool:
    return "importlib" in frame.f_code.co_filename and "_bootstrap" in frame.f_code.co_filename


def _in_import_system(frame) -> bool:
    return _bootstrap(frame) or frame.f_code.co_filename in (__file__, importlib.__file__)


def install() -> None:
    """Puts the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, OldPathFinder())


def is_old_path(module_name: str) -> bool:
    return bool(new_path(module_name)) or module_name in NAMES or module_name in REMOVED or module_name in PACKAGES


__all__ = ["MOVED", "NAMES", "REMOVED", "REMOVED_NAMES", "PACKAGES", "install", "is_old_path", "new_path",
           "OldPathFinder"]
