"""What pruning gained: parameters, MACs and CPU latency of a model, before and after."""
import copy
import statistics
import time

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..errors import ConfigError
from .architecture import unwrap_model


def example_input_shape(input_size) -> list:
    """The example input's shape ``[1, C, H, W]`` from ``[N, C, H, W]`` or ``[W, H]`` (3 channels)."""
    size = [int(s) for s in input_size]
    if len(size) == 4:
        return size
    if len(size) == 2:
        width, height = size
        return [1, 3, height, width]
    raise ConfigError(f"input_size {list(input_size)} is ambiguous: give the example input's shape [1, C, H, W] (or [W, H])")


def profile_model(model: nn.Module, input_size, repeats: int = 10) -> dict:
    """``{"params", "macs", "latency_ms"}`` of ``model`` for one input of ``input_size``.

    MACs count convolutions and matrix products (torch's FlopCounterMode, halved);
    latency is the median of ``repeats`` forward passes on the CPU without gradients.
    """
    shape = example_input_shape(input_size)
    model = unwrap_model(model)
    # Measure a CPU copy, in eval mode, so the model being trained is left as it was.
    cpu_model = copy.deepcopy(model).cpu().eval()
    example = torch.randn(shape)
    with torch.no_grad():
        with FlopCounterMode(display=False) as counter:
            cpu_model(example)
        for _ in range(2):  # warm-up: first passes pay for allocation and kernel selection
            cpu_model(example)
        times = []
        for _ in range(max(1, repeats)):
            start = time.perf_counter()
            cpu_model(example)
            times.append(time.perf_counter() - start)
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "macs": counter.get_total_flops() // 2,
        "latency_ms": 1000.0 * statistics.median(times),
    }


def layer_widths(spec: dict) -> dict:
    """Output width of each convolution and linear layer in an architecture spec."""
    widths = {}
    for name, entry in spec.items():
        width = entry.get("out_channels", entry.get("out_features"))
        if width is not None:
            widths[name] = width
    return widths


def pruning_report(before: dict, after: dict, spec_before: dict, spec_after: dict, **settings) -> dict:
    """One plain dict of what pruning did: the settings, both profiles and every changed layer."""
    widths_before, widths_after = layer_widths(spec_before), layer_widths(spec_after)
    return {
        **settings,
        "before": before,
        "after": after,
        "params_removed": 1.0 - after["params"] / max(1, before["params"]),
        "macs_removed": 1.0 - after["macs"] / max(1, before["macs"]),
        "speedup": before["latency_ms"] / max(1e-9, after["latency_ms"]),
        "layers": {
            name: {"before": widths_before[name], "after": widths_after.get(name)}
            for name in widths_before
        },
    }


def format_report(report: dict) -> str:
    """The report's headline as one log line."""
    before, after = report["before"], report["after"]
    return (
        f"pruned ({report.get('backend')}, {report.get('prune_mod')}, sparsity {report.get('sparsity')}): "
        f"params {_millions(before['params'])} -> {_millions(after['params'])} (-{report['params_removed']:.1%}), "
        f"MACs {_millions(before['macs'])} -> {_millions(after['macs'])} (-{report['macs_removed']:.1%}), "
        f"CPU latency {before['latency_ms']:.1f} ms -> {after['latency_ms']:.1f} ms ({report['speedup']:.2f}x) "
        f"for input {report.get('input_shape')}"
    )


def _millions(count: int) -> str:
    return f"{count / 1e6:.2f}M"
