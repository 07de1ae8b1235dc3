"""What a text run shows of itself: the loss and perplexity over every token of the evaluation set (all
processes), a classifier's accuracy, and the tokens trained per second."""
import math
import time

import torch

from ...callbacks import LossesRecorder
from ...callbacks.recording import phase_reduction
from ...distributed import comm
from ...engine.events import HIGH, Callback
from ...utils.log import get_logger


class TokenLossRecorder(LossesRecorder):
    """``loss`` and ``perplexity`` (its exponential): in training the epoch's mean of the batches' losses (as
    :class:`~basetrainer.callbacks.LossesRecorder`); in evaluation the mean over every token that takes a loss,
    on every process, so that it is one process's value whatever the batches and processes. ``run_step`` gives the
    evaluation's ``outputs`` as ``{"loss_sum", "tokens"}`` (causal LM) or ``{"loss_sum", "tokens", "correct"}``
    with one token per sequence (sequence classification: ``loss`` and ``Acc``, in percent, no perplexity)."""

    def __init__(self, accuracy: bool = False):
        super().__init__(indicator="loss")
        self.accuracy = accuracy
        self._sums = None

    def publishes(self):
        return ("loss", "Acc") if self.accuracy else ("loss", "perplexity")

    def on_test_begin(self, logs=None):
        self._sums = None

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        values = [outputs["loss_sum"].detach().double(), outputs["tokens"].double()]
        if self.accuracy:
            values.append(outputs["correct"].double())
        batch_sums = torch.stack(values)
        self._sums = batch_sums if self._sums is None else self._sums + batch_sums

    def on_test_end(self, logs=None):
        reduce = phase_reduction(self, "test")
        if reduce is None or logs is None:
            return
        sums = self._sums if self._sums is not None else torch.zeros(3 if self.accuracy else 2, dtype=torch.float64,
                                                                     device=self.trainer.device)
        if reduce:
            sums = comm.all_reduce_sum(sums)
        loss_sum, tokens, *correct = sums.tolist()
        if tokens:
            test = logs.setdefault("test", {})
            test["loss"] = loss_sum / tokens
            if self.accuracy:
                test["Acc"] = 100.0 * correct[0] / tokens
            else:
                test["perplexity"] = _perplexity(test["loss"])

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        train = (logs or {}).get("train", {})
        if "loss" in train and not self.accuracy:
            train["perplexity"] = _perplexity(train["loss"])


def _perplexity(loss: float) -> float:
    return math.exp(min(loss, 700.0))  # past e^700 a float overflows: the model has learnt nothing


class TokenThroughput(Callback):
    """Counts the tokens trained (the attention mask's ones, on the device: no sync per batch) and publishes
    ``logs["train"]["tokens_per_s"]`` (all processes, training time only: evaluations left out) at each
    evaluation and epoch end; after each evaluation one line with it and the test loss and perplexity."""

    priority = HIGH

    def __init__(self, logger=None):
        super().__init__()
        self.logger = logger or get_logger()
        self._tokens = None
        self._seconds = 0.0
        self._since = None

    def on_train_begin(self, logs=None):
        self._tokens = torch.zeros((), dtype=torch.float64, device=self.trainer.device)
        self._since = time.perf_counter()

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self._tokens += inputs["attention_mask"].sum()

    def on_test_begin(self, logs=None):
        self._pause()

    def on_test_end(self, logs=None):
        self._publish(logs)
        self._since = time.perf_counter()

    def on_evaluation_end(self, logs=None):
        test = (logs or {}).get("test", {})
        if comm.is_main_process() and "perplexity" in test:
            self.logger.info("step %d: tokens/s (all processes) %.0f; test loss %.4f, perplexity %.3f",
                             self.state.global_step, (logs or {}).get("train", {}).get("tokens_per_s", 0.0),
                             test["loss"], test["perplexity"])

    def on_epoch_end(self, epoch, logs=None):
        self._pause()
        self._publish(logs)
        self._since = time.perf_counter()

    def _pause(self):
        if self._since is not None:
            self._seconds += time.perf_counter() - self._since
            self._since = None

    def _publish(self, logs):
        if self._tokens is None or logs is None or not self._seconds:
            return
        tokens, = comm.sum_over_ranks(self._tokens)
        logs.setdefault("train", {})["tokens_per_s"] = tokens / self._seconds
