"""An exponential moving average (EMA) of the model's weights, used for evaluation and export."""
from collections import defaultdict

import torch
from torch.optim.swa_utils import get_ema_multi_avg_fn

from ..engine.events import HIGHEST, Callback
from ..parallel import unwrap_model
from ..parallel.base import is_dtensor
from ..utils.log import get_logger

logger = get_logger()


class EMA(Callback):
    """Averages the weights after every ``every_n_steps`` optimizer steps; evaluates with the average.

    After each optimizer step (not after batches whose gradients wait in an accumulation
    window) the floating-point weights and buffers of the unwrapped model move towards
    the model's: ``ema = decay * ema + (1 - decay) * weights``, torch's
    ``get_ema_multi_avg_fn``; integer buffers (e.g. BatchNorm's batch counter) are copied.
    With ``warmup`` the decay starts low and rises to ``decay`` as
    ``min(decay, (1 + n) / (10 + n))`` after ``n`` updates, so early weights fade fast.

    Evaluation runs with the averaged weights: they are copied into the model at
    ``on_test_begin`` and the training weights are put back at ``on_test_end``. The
    priority is HIGHEST so that both happen before any other callback's handler of those
    events: the test batches and other callbacks' ``on_test_begin`` see the averaged
    weights, other callbacks' ``on_test_end`` and ``on_epoch_end`` (checkpoints) see the
    training weights again, and ``last.pth`` holds the training weights with the average
    in this callback's state, so a resumed run continues exactly.

    ``weights_for_export()`` gives the averaged weights; the trainer's ``export_weights()``
    returns them, so the best and final model files hold the average.

    Under FSDP each rank averages its own shards; the export and the checkpoint hold the
    whole tensors (gathered, on every rank), and a resumed run takes its shards back out of
    them.
    """

    priority = HIGHEST

    def __init__(self, decay: float = 0.999, warmup: bool = True, every_n_steps: int = 1):
        super().__init__()
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"EMA: decay must be in [0, 1], got {decay!r}")
        if int(every_n_steps) < 1:
            raise ValueError(f"EMA: every_n_steps must be >= 1, got {every_n_steps!r}")
        self.decay = float(decay)
        self.warmup = bool(warmup)
        self.every_n_steps = int(every_n_steps)
        self.updates = 0
        self.averaged = None  # {state_dict key: tensor}; on the model's device once bound
        self._pairs = None  # [(averaged tensor, model tensor)] in state_dict order
        self._floating = []  # the floating-point pairs as (averages, currents) lists, one per mesh, for foreach updates
        self._others = []  # integer buffers, copied
        self._backup = None
        self._last_step = None  # the global step of the last update; from the checkpoint when resumed

    # ------------------------------------------------------------------ events
    def attach(self, trainer) -> None:
        super().attach(trainer)
        if trainer is not None:
            trainer.set_export_weights(self.weights_for_export)

    def publishes(self):
        return ()  # swaps the weights evaluated, publishes nothing

    def on_train_begin(self, logs=None):
        self._bind(self.trainer.model)
        if self._last_step is None:
            self._last_step = self.state.global_step

    def on_batch_end(self, batch, logs=None):
        state = self.state
        step = state.global_step
        if state.accumulating or step == self._last_step or step % self.every_n_steps:
            return
        self._last_step = step
        self.update()

    def on_test_begin(self, logs=None):
        if self._pairs is None and self.averaged is not None and self.trainer is not None:
            self._bind(self.trainer.model)  # evaluate() after load_state_dict, without on_train_begin
        if self._pairs is None:
            return
        with torch.no_grad():
            self._backup = [current.clone() for _, current in self._pairs]
            for average, current in self._pairs:
                current.copy_(average)

    def on_test_end(self, logs=None):
        if self._backup is None:
            return
        with torch.no_grad():
            for (_, current), saved in zip(self._pairs, self._backup):
                current.copy_(saved)
        self._backup = None

    # ------------------------------------------------------------------ averaging
    def current_decay(self) -> float:
        """The decay the next update uses."""
        if not self.warmup:
            return self.decay
        n = self.updates + 1
        return min(self.decay, (1 + n) / (10 + n))

    def update(self) -> None:
        """Moves the average one step towards the model's current weights."""
        average_step = get_ema_multi_avg_fn(self.current_decay())
        for averages, currents in self._floating:  # one group per mesh: foreach ops take no mix
            average_step(averages, currents, self.updates)
        with torch.no_grad():
            for average, current in self._others:
                average.copy_(current)
        self.updates += 1

    def _bind(self, model) -> None:
        """Pairs each averaged tensor with the model's, starting the average from the model if needed."""
        current = unwrap_model(model).state_dict()
        if self.averaged is not None and not _same_layout(self.averaged, current):
            logger.warning("EMA: the saved average does not match the model's weights; averaging starts afresh")
            self.averaged, self.updates = None, 0
        if self.averaged is None:
            self.averaged = {k: v.detach().clone() for k, v in current.items()}
        else:
            self.averaged = {k: _like(self.averaged[k], v) for k, v in current.items()}
        self._pairs = [(self.averaged[k], v) for k, v in current.items()]
        by_mesh = defaultdict(list)  # tensor-parallel, FSDP-sharded and plain tensors apart
        for a, c in self._pairs:
            if a.is_floating_point():
                by_mesh[a.device_mesh if is_dtensor(a) else None].append((a, c))
        self._floating = [([a for a, _ in pairs], [c for _, c in pairs]) for pairs in by_mesh.values()]
        self._others = [(a, c) for a, c in self._pairs if not a.is_floating_point()]

    # ------------------------------------------------------------------ export and state
    def weights_for_export(self) -> dict:
        """The averaged weights as a plain state_dict: CPU tensors, keys without wrapper prefixes.

        Before the first update this is the model's own weights.
        """
        if self.averaged is None:
            trainer = self.trainer
            if trainer is None:
                raise RuntimeError("EMA has no weights yet: it needs a trainer, or load_state_dict first")
            self._bind(trainer.model)
        return self._gathered({k: _whole(v).detach().cpu().clone() for k, v in self.averaged.items()})

    def _gathered(self, averaged: dict) -> dict:
        """The whole average on rank 0 where a pipeline spreads it over processes (each holds its stages')."""
        strategy = getattr(self.trainer, "strategy", None) if self.trainer is not None else None
        return strategy.gather_stages(averaged) if strategy is not None else averaged

    def state_dict(self):
        averaged = None if self.averaged is None else \
            self._gathered({k: _whole(v).detach().cpu() for k, v in self.averaged.items()})
        return {"averaged": averaged, "updates": self.updates, "last_step": self._last_step}

    def load_state_dict(self, state):
        averaged = state["averaged"]
        self.averaged = None if averaged is None else {k: v.clone() for k, v in averaged.items()}
        self.updates = int(state["updates"])
        self._last_step = state.get("last_step")
        self._pairs = None
        if self.averaged is not None and self.trainer is not None and self.trainer.model is not None:
            self._bind(self.trainer.model)


def _same_layout(averaged: dict, current: dict) -> bool:
    """Whether a saved average fits the model: the same keys and shapes (a pruned model has other shapes); under a
    pipeline the model holds this process's stages' keys only."""
    return set(averaged) >= set(current) and all(averaged[k].shape == v.shape for k, v in current.items())


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: an FSDP shard (a DTensor) gathered from every rank (a collective), else itself."""
    return tensor.full_tensor() if is_dtensor(tensor) else tensor


def _like(saved: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """``saved`` (a whole tensor, or a shard) on ``current``'s device and dtype; sharded as ``current``
    when that is an FSDP shard (every rank holds the whole ``saved``, and keeps its own part)."""
    if is_dtensor(current) and not is_dtensor(saved):
        from torch.distributed.tensor import distribute_tensor  # imported already: current is a DTensor
        return distribute_tensor(saved.to(device=current.device, dtype=current.dtype), current.device_mesh,
                                 current.placements, src_data_rank=None)
    return saved.to(device=current.device, dtype=current.dtype)
