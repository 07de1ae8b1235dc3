"""The text of LogHistory's log lines: one every few batches, one per epoch, one per mid-epoch evaluation."""
from ..loggers.base import flatten
from ..utils.eta import format_seconds


def step_line(state, batch, scalars, eta) -> str:
    """``epoch 2/10 iter 340/1000 loss 0.4123 lr 0.01 samples/s 1520 data 12% mem 2.41GiB FLOP/s 212T MFU 21.4%
    eta 0:03:12`` (``step 340/1000`` first when training for max_iters); ``scalars``: a window's
    (see :class:`~.throughput_window.ThroughputWindow`), ``eta``: seconds, or None."""
    steps = state.batches_per_epoch
    if state.max_steps is not None:
        where = [f"step {state.global_step}/{state.max_steps}"]
    else:
        where = [f"epoch {state.epoch + 1}/{state.max_epochs}",
                 f"iter {batch + 1}/{steps}" if steps else f"iter {batch + 1}"]
    parts = [*where,
             f"loss {scalars['train/loss_step']:.4f}", f"lr {scalars['train/lr']:.4g}",
             f"samples/s {scalars['train/samples_per_s']:.0f}", f"data {100 * scalars['train/data_wait']:.0f}%"]
    if "train/peak_memory_gib" in scalars:
        parts.append(f"mem {scalars['train/peak_memory_gib']:.2f}GiB")
    if "train/flops_per_s" in scalars:
        parts.append(f"FLOP/s {_si(scalars['train/flops_per_s'])}")
    if "train/mfu" in scalars:
        parts.append(f"MFU {100 * scalars['train/mfu']:.1f}%")
    if eta is not None:
        parts.append(f"eta {format_seconds(eta)}")
    return " ".join(parts)


def epoch_line(record, seconds, max_epochs=None) -> str:
    """``epoch 3/12 done in 0:00:41 | lr 0.05 | train loss 0.31 Acc 91.2 | test loss 0.35 Acc 90.1``."""
    total = f"/{max_epochs}" if max_epochs is not None else ""
    parts = [f"epoch {record['epoch']}{total} done in {format_seconds(seconds)}", f"lr {record['lr']:.4g}"]
    for phase in ("train", "test"):
        values = flatten(record[phase])
        if values:
            parts.append(phase + " " + " ".join(f"{name} {value:.5g}" for name, value in values.items()))
    return " | ".join(parts)


def run_line(samples, seconds, rates, steady_after) -> str:
    """``trained 16896 samples in 0:01:10 | samples/s 241 over the whole run (start-up excluded; compilation,
    evaluations, checkpoints included), 380 in steady state (after the first 10 batches, evaluations left out) |
    MFU 12.1% over the whole run, 19.0% in steady state``: the closing line. ``rates``: an epoch record's
    ``whole_run_*`` and ``steady_*`` figures (see :class:`~.run_throughput.RunThroughput`); a figure missing
    there is missing here (no steady state before the first ``steady_after`` batches, no MFU off known GPUs)."""
    parts = [f"trained {samples} samples in {format_seconds(seconds)}"]
    rate = []
    if "whole_run_samples_per_s" in rates:
        rate.append(f"{rates['whole_run_samples_per_s']:.0f} over the whole run (start-up excluded; compilation, "
                    f"evaluations, checkpoints included)")
    if "steady_samples_per_s" in rates:
        rate.append(f"{rates['steady_samples_per_s']:.0f} in steady state (after the first {steady_after} batches, "
                    f"evaluations left out)")
    if rate:
        parts.append("samples/s " + ", ".join(rate))
    mfu = [f"{100 * rates[f'{kind}_mfu']:.1f}% {words}" for kind, words in
           (("whole_run", "over the whole run"), ("steady", "in steady state")) if f"{kind}_mfu" in rates]
    if mfu:
        parts.append("MFU " + ", ".join(mfu))
    return " | ".join(parts)


def evaluation_line(state, results) -> str:
    """``step 400/1000 test loss 0.35 Acc 90.1``: an evaluation every N steps, not at an epoch's end."""
    return (f"step {state.global_step}" + (f"/{state.max_steps}" if state.max_steps else "")
            + " test " + " ".join(f"{name} {value:.5g}" for name, value in results.items()))


def _si(value: float) -> str:
    """``2.5e12`` -> ``"2.5T"``."""
    for prefix in ("", "k", "M", "G", "T"):
        if abs(value) < 1000:
            return f"{value:.3g}{prefix}"
        value /= 1000
    return f"{value:.3g}P"
