"""Local SGD and post-local SGD: the replicas step on their own gradients and average their parameters every few steps.

torch's pieces: ``post_localSGD_hook`` makes DDP all-reduce the gradients during the warm-up
and leave each replica's own after it; the replicas then average their parameters after the
optimizer steps ``PeriodicModelAverager`` names (the first step after the warm-up, then every
``period``-th). Lin et al., "Don't use large mini-batches, use local SGD" (ICLR 2020).

What basetrainer adds around them:

- the averaging runs right after ``optimizer.step()`` (a step post-hook on the optimizer the
  strategy is handed), so the training loop knows nothing of it;
- evaluation, checkpoints and exported weights use the replicas' average: mid-period it is
  computed for them (one all-reduce per optimizer step at most, said in the log) and swapped
  in for the while; training goes on from each replica's own weights, so how often a run
  evaluates or saves changes nothing in its training;
- a checkpoint holds every replica's own parameters (while they differ) and optimizer state
  (momentum is never averaged), gathered to the main process, with the step count and the
  hook's iteration: a run resumed on as many processes continues bitwise; on another number
  of processes every replica starts from the average (the checkpoint's model), with a warning.
"""
import contextlib

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState, post_localSGD_hook

from ..distributed import comm
from ..utils.log import get_logger

logger = get_logger()


class LocalSGD:
    """``local_sgd: {period, warmup_steps}`` on one DDP model (see the module docstring)."""

    def __init__(self, period: int, warmup_steps: int = 0):
        self.period, self.warmup_steps = period, warmup_steps
        # No gradient all-reduce after the warm-up, so no subgroup: torch's default one (one per machine,
        # from new_subgroups) needs CUDA, and on one machine it is the whole world, which is plain DDP.
        self.hook_state = PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=warmup_steps,
                                            post_local_gradient_allreduce=False)
        self.steps = 0  # optimizer steps taken (torch's ModelAverager.step)
        self.diverged = False  # whether the replicas' parameters differ now
        self.named_parameters, self.optimizer = [], None
        self._gradients_reduced = True  # whether the last backward all-reduced the gradients
        self._average = None  # the replicas' average at this step, once computed (flat)
        self._own = None  # this replica's parameters while the average is swapped in

    @property
    def parameters(self) -> list:
        return [parameter for _, parameter in self.named_parameters]

    def register(self, ddp_model) -> None:
        self.named_parameters = [(name, p) for name, p in ddp_model.module.named_parameters() if p.requires_grad]
        ddp_model.register_comm_hook(self.hook_state, self._hook)

    def _hook(self, state, bucket):
        self._gradients_reduced = state.iter < state.start_localSGD_iter
        return post_localSGD_hook(state, bucket)

    def attach_optimizer(self, optimizer) -> None:
        self.optimizer = optimizer
        optimizer.register_step_post_hook(self._after_step)

    def _after_step(self, optimizer, args, kwargs) -> None:
        step, self.steps = self.steps, self.steps + 1
        self._average = None
        if step >= self.warmup_steps and (step - self.warmup_steps) % self.period == 0:
            _copy_into(self.parameters, replica_average(self.parameters))
            self.diverged = False
        elif not self._gradients_reduced:
            self.diverged = True

    # ------------------------------------------------------------------ the average, for evaluation and saving
    @contextlib.contextmanager
    def averaged_weights(self):
        """A context in which the parameters hold the replicas' average (yields True), each replica's own
        put back after; yields False, changing nothing, when they are equal or already averaged here."""
        if not self.diverged or self._own is not None:
            yield False
            return
        if self._average is None:
            self._average = replica_average(self.parameters)
            if comm.is_main_process():
                logger.info("local SGD: the %d replicas differ at optimizer step %d (they average every %d): "
                            "evaluation, checkpoints and exported weights here use their average",
                            comm.get_world_size(), self.steps, self.period)
        with torch.no_grad():
            self._own = [p.detach().clone() for p in self.parameters]
        _copy_into(self.parameters, self._average)
        try:
            yield True
        finally:
            with torch.no_grad():
                for p, own in zip(self.parameters, self._own):
                    p.copy_(own)
            self._own = None

    # ------------------------------------------------------------------ checkpoint part
    def checkpoint_parts(self) -> dict:
        return {"local_sgd": self}

    def state_dict(self) -> dict:
        """Step counts, and every replica's parameters (while they differ) and optimizer state, on the main process."""
        own = self._own or [p.detach() for p in self.parameters]
        replica = {"parameters": {name: value.cpu().clone() for (name, _), value in zip(self.named_parameters, own)}
                   if self.diverged else None, "optimizer": self.optimizer.state_dict()}
        return {"local_sgd": {"steps": self.steps, "hook_iter": self.hook_state.iter,
                              "replicas": comm.gather_to_main(replica)}}

    def load_state_dict(self, saved: dict, name: str) -> None:
        entry, main = saved.get("local_sgd"), comm.is_main_process()
        self._average, self.diverged = None, False
        if entry is None:
            self.steps = int(saved.get("iteration", 0))
            self.hook_state.iter = min(self.steps, self.warmup_steps)
            if main:
                logger.warning("%s was written without local SGD: local SGD starts at its step %d, its warm-up "
                               "counted from the run's first step", name, self.steps)
            return
        self.steps, self.hook_state.iter = int(entry["steps"]), int(entry["hook_iter"])
        replicas, world_size = entry.get("replicas") or [], comm.get_world_size()
        if len(replicas) != world_size:
            if main:
                logger.warning("%s was written by %d process(es) under local SGD and this run has %d: every replica "
                               "starts from their average (the checkpoint's model) with the first process's "
                               "optimizer state, so the run does not continue exactly", name, len(replicas),
                               world_size)
            return
        own = replicas[comm.get_rank()]
        self.optimizer.load_state_dict(own["optimizer"])
        if own["parameters"] is not None:
            values = [own["parameters"][name] for name, _ in self.named_parameters]
            _copy_into(self.parameters, torch.cat([value.reshape(-1) for value in values]))
            self.diverged = True

    def describe(self) -> str:
        warmup = (f"after {self.warmup_steps} steps of ordinary DDP (post-local SGD)" if self.warmup_steps
                  else "from the first step")
        return (f"local SGD: each replica steps on its own gradients and they average their parameters every "
                f"{self.period} optimizer steps, {warmup}; evaluation, checkpoints and exported weights use the "
                f"replicas' average")


def replica_average(parameters) -> torch.Tensor:
    """The parameters averaged over every process, flattened into one tensor (one all-reduce; divided
    before summing, as torch's ``average_parameters`` does, so that half-precision values do not overflow)."""
    flat = torch.cat([p.detach().reshape(-1) for p in parameters]) / comm.get_world_size()
    dist.all_reduce(flat)
    return flat


def _copy_into(parameters, flat: torch.Tensor) -> None:
    """Copies ``flat`` into the parameters, in place. torch's ``average_parameters`` rebinds ``p.data``
    instead, which would leave stale every tensor taken from ``state_dict()`` before (an EMA's, say)."""
    offset = 0
    with torch.no_grad():
        for p in parameters:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
