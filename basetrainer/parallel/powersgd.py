"""PowerSGD gradient compression (``grad_compression: powersgd``), with its state in checkpoints.

torch's ``powerSGD_hook`` (Vogels et al., NeurIPS 2019) approximates each gradient matrix M
(n x m) by P Q^T of rank r: it all-reduces P (n x r) and Q (m x r) instead of M, and the
vectors (biases, norms), which would not shrink, uncompressed. What the approximation missed
is added to the next step's gradient (error feedback), and each Q starts from the last one
(warm start). Before ``start_step`` optimizer steps it all-reduces the full gradients. Every
replica receives the same gradients, so the replicas stay equal.

Its state is kept per DDP bucket: the error feedback as one flat tensor over the bucket's
gradients, the Qs as one tensor laid out by matrix shape. DDP lays its buckets out again after
its first step (in the order the gradients became ready), so a resumed run's first steps see
another layout than the one the state was saved in. The checkpoint therefore holds the state
per parameter (the Qs, the same on every rank, and each rank's own error feedback, gathered
to the main process), and a bucket's tensors are put together from it when DDP hands a bucket
whose parameters are not those its state covers (``PowerSGD._hook``).
"""
import contextlib

import numpy as np
import torch
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook

from ..distributed import comm
from ..utils.log import get_logger

logger = get_logger()


class PowerSGD:
    """``grad_compression: powersgd`` with ``powersgd: {rank, start_step}`` on one DDP model."""

    def __init__(self, rank: int, start_step: int):
        self.state = PowerSGDState(process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=start_step)
        self.shapes = {}  # parameter name -> shape
        self.layout = {}  # bucket index -> the names of the parameters its state tensors cover, in order
        self.pending = {"error": {}, "q": {}}  # name -> tensor: state waiting for the bucket that holds it now
        self._names = {}  # id(parameter) -> name

    def register(self, ddp_model) -> None:
        self._names = {id(p): name for name, p in ddp_model.module.named_parameters()}
        self.shapes = {name: p.shape for name, p in ddp_model.module.named_parameters()}
        ddp_model.register_comm_hook(self.state, self._hook)

    def _hook(self, state, bucket):
        names = tuple(self._names[id(p)] for p in bucket.parameters())
        if self.layout.get(bucket.index()) != names:
            self._lay_out(bucket.index(), names, bucket.buffer())
        future = powerSGD_hook(state, bucket)
        if bucket.buffer().device.type == "cpu":
            # gloo completes a collective's future on a thread of its own, and powerSGD_hook issues the
            # bucket's next all-reduces (Ps, then Qs) from there: the next bucket's first all-reduce could go
            # out before them on one rank and after them on another, a collective mismatch ("Received data
            # size doesn't match expected size"). Waiting keeps every rank's all-reduces in one order.
            # (CUDA futures complete when the work is queued, so the chain is issued in order at once.)
            future.wait()
        return future

    def _lay_out(self, index: int, names: tuple, buffer: torch.Tensor) -> None:
        """Gives bucket ``index``, now holding ``names``, its state: taken back per parameter from the
        buckets that held them (none of them has run in this step: buckets partition the parameters)."""
        wanted = set(names)
        for other, held in list(self.layout.items()):
            if other == index or wanted & set(held):
                self.pending = _merge(self.pending, self._split(other, held))
                for memory in (self.state.error_dict, self.state.p_memory_dict, self.state.q_memory_dict):
                    memory.pop(other, None)
                del self.layout[other]
        self.layout[index] = names
        compressed = self._compressed(names)
        errors, qs = self.pending["error"], self.pending["q"]
        if any(name in errors for name in names):
            self.state.error_dict[index] = torch.cat([
                errors.pop(name).to(buffer) if name in errors else buffer.new_zeros(self.shapes[name].numel())
                for name in names])
        if compressed and all(name in qs for name, *_ in compressed):
            self.state.q_memory_dict[index] = torch.cat([qs.pop(name).to(buffer) for name, *_ in compressed])
            self.state.p_memory_dict[index] = buffer.new_zeros(sum(n * r for _, n, _, r in compressed))

    def _compressed(self, names) -> list:
        """``(name, n, m, r)`` of the gradients PowerSGD compresses in a bucket of ``names``, in the order it
        lays out their Ps and Qs: grouped by matrix shape, in order of first appearance (as powerSGD_hook does)."""
        groups = {}
        for name in names:
            shape = self.shapes[name]
            n = shape[0]
            m = shape.numel() // n
            r = min(n, m, self.state.matrix_approximation_rank)
            if (n + m) * r * self.state.min_compression_rate < n * m:
                groups.setdefault((n, m), []).append((name, n, m, r))
        return [entry for group in groups.values() for entry in group]

    def _split(self, index: int, names: tuple) -> dict:
        """Bucket ``index``'s error feedback and Qs, per parameter."""
        split = {"error": {}, "q": {}}
        error = self.state.error_dict.get(index)
        if error is not None:
            sizes = [self.shapes[name].numel() for name in names]
            split["error"] = dict(zip(names, error.split(sizes)))
        q = self.state.q_memory_dict.get(index)
        if q is not None:
            compressed = self._compressed(names)
            split["q"] = dict(zip([name for name, *_ in compressed], q.split([m * r for _, _, m, r in compressed])))
        return split

    # ------------------------------------------------------------------ checkpoint part
    def checkpoint_parts(self) -> dict:
        return {"powersgd": self}

    def state_dict(self) -> dict:
        """The step count, the Qs and the random stream (the same on every rank), and every rank's error feedback."""
        per_parameter = self.pending
        for index, names in self.layout.items():
            per_parameter = _merge(per_parameter, self._split(index, names))
        state = self.state
        return {"powersgd": {
            "iter": state.iter, "rng": _numpy_state(state.rng),
            "numel": [state.total_numel_before_compression, state.total_numel_after_compression],
            "q": {name: value.cpu().clone() for name, value in per_parameter["q"].items()},
            "errors": comm.gather_to_main({name: value.cpu().clone() for name, value in per_parameter["error"].items()}),
        }}

    def load_state_dict(self, saved: dict, name: str) -> None:
        entry, state = saved.get("powersgd"), self.state
        for memory in (state.error_dict, state.p_memory_dict, state.q_memory_dict, self.layout):
            memory.clear()
        if entry is None:
            state.iter = min(int(saved.get("iteration", 0)), state.start_powerSGD_iter)
            if comm.is_main_process():
                logger.warning("%s was written without PowerSGD: it compresses from step %d of the run on", name,
                               state.start_powerSGD_iter)
            self.pending = {"error": {}, "q": {}}
            return
        state.iter = int(entry["iter"])
        state.rng.set_state(_from_numpy_state(entry["rng"]))
        state.total_numel_before_compression, state.total_numel_after_compression = entry["numel"]
        errors = entry["errors"] or []
        if len(errors) != comm.get_world_size() and comm.is_main_process():
            logger.warning("%s was written by %d process(es) under PowerSGD and this run has %d: its error feedback "
                           "starts from zero", name, len(errors), comm.get_world_size())
        own = errors[comm.get_rank()] if len(errors) == comm.get_world_size() else {}
        self.pending = {"error": dict(own), "q": dict(entry["q"])}

    # ------------------------------------------------------------------ what the strategy asks of every kind
    def attach_optimizer(self, optimizer) -> None:
        """Nothing happens around the optimizer's steps."""

    def averaged_weights(self):
        """The replicas are equal (every one receives the same gradients): nothing to average."""
        return contextlib.nullcontext(False)

    def describe(self) -> str:
        return (f"PowerSGD: gradient matrices all-reduced as rank-{self.state.matrix_approximation_rank} factors "
                f"with error feedback from optimizer step {self.state.start_powerSGD_iter} on (full gradients "
                f"before), vectors in full")


def _merge(first: dict, second: dict) -> dict:
    return {kind: {**first[kind], **second[kind]} for kind in first}


def _numpy_state(rng: np.random.RandomState) -> list:
    """A numpy generator's state in checkpoint-safe types."""
    key, keys, position, has_gauss, gauss = rng.get_state()
    return [key, torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss), float(gauss)]


def _from_numpy_state(state: list) -> tuple:
    key, keys, position, has_gauss, gauss = state
    return key, keys.numpy().astype(np.uint32), position, has_gauss, gauss
