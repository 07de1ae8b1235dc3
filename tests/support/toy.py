"""A toy trainer for in-process tests: every hook is filled, every option comes from cfg."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from basetrainer.engine.events import LOWEST, Callback
from basetrainer.engine.trainer import EngineTrainer


def blobs(n=128, seed=0, features=8, classes=4):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, features, generator=g) + 2.0 * nn.functional.one_hot(y, features).float()
    return TensorDataset(x, y)


class ToyTrainer(EngineTrainer):
    """Linear classifier on Gaussian blobs; ``cfg`` keys beyond the trainer's: batch_size, lr,
    train_size, test_size, callbacks (a list), loss (a callable (outputs, targets) -> losses)."""

    resume_settings = (*EngineTrainer.resume_settings, "lr", "batch_size")  # the task's own, as a task declares them

    def __init__(self, cfg):
        super().__init__(cfg)
        self.calls = []
        self.build(cfg)

    def build_train_loader(self, cfg):
        self.calls.append("build_train_loader")
        data = blobs(cfg.get("train_size", 128), seed=0)
        if cfg.get("plain_loader"):
            return DataLoader(data, batch_size=cfg.get("batch_size", 16), shuffle=False)
        return self.build_dataloader(data, cfg.get("batch_size", 16), 0, shuffle=cfg.get("shuffle", True),
                                     drop_last=cfg.get("drop_last", True))

    def build_test_loader(self, cfg):
        self.calls.append("build_test_loader")
        if not cfg.get("test_size", 64):
            return None
        return self.build_dataloader(blobs(cfg.get("test_size", 64), seed=1), 16, 0, phase="test", shuffle=False)

    def build_model(self, cfg):
        self.calls.append("build_model")
        torch.manual_seed(0)
        return self.build_model_parallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))

    def build_criterion(self, cfg):
        self.calls.append("build_criterion")
        return cfg.get("loss") or nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        self.calls.append("build_optimizer")
        return torch.optim.SGD(self.model.parameters(), lr=cfg.get("lr", 0.1))

    def build_callbacks(self, cfg):
        self.calls.append("build_callbacks")
        return list(cfg.get("callbacks", []))


def toy_cfg(**overrides):
    cfg = {"num_epochs": 2, "gpu_id": None, "progress": False, "seed": 3}
    cfg.update(overrides)
    return cfg


class EventLog(Callback):
    """Records every event it receives, as (event, arguments) tuples."""

    def __init__(self):
        super().__init__()
        self.events = []

    def on_train_begin(self, logs):
        self.events.append(("on_train_begin",))

    def on_epoch_begin(self, epoch, logs):
        self.events.append(("on_epoch_begin", epoch))

    def on_batch_begin(self, batch, logs):
        self.events.append(("on_batch_begin", batch))

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self.events.append(("on_train_summary", epoch, batch))

    def on_batch_end(self, batch, logs):
        self.events.append(("on_batch_end", batch))

    def on_test_begin(self, logs):
        self.events.append(("on_test_begin",))

    def on_test_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self.events.append(("on_test_summary", epoch, batch))

    def on_test_end(self, logs):
        self.events.append(("on_test_end",))

    def on_epoch_end(self, epoch, logs):
        self.events.append(("on_epoch_end", epoch))

    def on_train_end(self, logs):
        self.events.append(("on_train_end",))

    def on_exception(self, error, logs):
        self.events.append(("on_exception", type(error).__name__))


class Crash(Callback):
    """Raises ``error`` at the end of batch ``batch`` (of ``epoch``, or of any epoch), after every other callback."""

    priority = LOWEST

    def __init__(self, batch, epoch=None, error=None):
        super().__init__()
        self.batch, self.epoch, self.error = batch, epoch, error or RuntimeError("boom")

    def on_batch_end(self, batch, logs):
        if batch == self.batch and self.epoch in (None, self.trainer.epoch):
            raise self.error
