"""What training achieves: the model's FLOPs counted once, the GPU's peak FLOP/s, peak memory."""
import re
import sys

import torch
from torch.utils.flop_counter import FlopCounterMode

#: Dense peak TFLOP/s per GPU, from NVIDIA's data sheets (SXM boards unless named), by
#: model and optional variant as words of torch.cuda.get_device_name; variants first.
PEAK_TFLOPS = (
    ("H100", "PCIE", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    ("H100", "NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("H100", None, {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("H200", "NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("H200", None, {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("A100", None, {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", None, {"bf16": 362.1, "fp16": 362.1, "tf32": 183.2, "fp32": 91.6}),
    ("L4", None, {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10", None, {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    ("V100", None, {"fp16": 125.0, "fp32": 15.7}),
    ("T4", None, {"fp16": 65.0, "fp32": 8.1}),
)


def peak_flops(device: torch.device, amp_dtype=None):
    """The device's dense peak FLOP/s for the training's precision (``amp_dtype``: the autocast
    dtype, None for float32, TF32 when torch's float32 matmul precision allows it), or None
    for a device or precision not in :data:`PEAK_TFLOPS`."""
    if device.type != "cuda":
        return None
    if amp_dtype is not None:
        precision = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(amp_dtype)
    else:
        precision = "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    return gpu_peak_flops(torch.cuda.get_device_name(device), precision)


def gpu_peak_flops(device_name: str, precision: str):
    """The dense peak FLOP/s of the GPU named ``device_name`` in ``precision`` (bf16, fp16, tf32,
    fp32), or None when :data:`PEAK_TFLOPS` does not have it."""
    words = set(re.split(r"[\s\-_]+", device_name.upper()))
    for model, variant, peaks in PEAK_TFLOPS:
        if model in words and (variant is None or variant in words):
            return peaks[precision] * 1e12 if precision in peaks else None
    return None


def peak_memory(device: torch.device):
    """Peak memory in bytes so far: allocated on the GPU for CUDA, the process's resident set
    on the CPU; None elsewhere (other accelerators, or no ``resource`` module, as on Windows)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    if device.type != "cpu":
        return None
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS counts bytes, Linux KiB


class ForwardFlops:
    """The FLOPs of one forward pass per sample, counted once on the first batch a model sees.

    A forward pre-hook on ``called`` (the module the loop calls) keeps the first call's
    arguments and removes itself. :meth:`count` then runs ``counted`` (the plain module
    inside any wrapper) once more on them, under ``FlopCounterMode``, without gradients
    and in eval mode, so that nothing changes: no BatchNorm statistics, no dropout draws
    from the random streams; each module's mode is put back afterwards. A model that fails
    under the counter counts as None, as does one never called (a custom ``run_step`` that
    calls a part of it).
    """

    def __init__(self, called: torch.nn.Module, counted: torch.nn.Module):
        self._counted = counted
        self._call = None
        self._hook = called.register_forward_pre_hook(self._keep_first_call, with_kwargs=True)

    def _keep_first_call(self, module, args, kwargs):
        self._call = (args, kwargs)
        self._hook.remove()

    def remove(self) -> None:
        self._hook.remove()
        self._call = None

    def count(self):
        """FLOPs per sample of one forward on the kept batch; None when it cannot be counted."""
        call, self._call = self._call, None
        self._hook.remove()
        if call is None:
            return None
        args, kwargs = call
        samples = _batch_size([*args, *kwargs.values()])
        if not samples:
            return None
        modes = [(module, module.training) for module in self._counted.modules()]
        try:
            self._counted.eval()
            with torch.no_grad(), FlopCounterMode(display=False) as counter:
                self._counted(*args, **kwargs)
            flops = counter.get_total_flops()
        except Exception:  # a model the counter cannot follow: no FLOP/s in the log, nothing else lost
            return None
        finally:
            for module, training in modes:
                module.training = training
        return flops / samples if flops else None


def _batch_size(args) -> int:
    first = next((arg for arg in args if isinstance(arg, torch.Tensor) and arg.ndim), None)
    return first.shape[0] if first is not None else 0
