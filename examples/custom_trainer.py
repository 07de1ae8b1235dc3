"""A trainer for your own task: a small regression on tensors, complete and runnable.

    python examples/custom_trainer.py                                # one process
    python examples/custom_trainer.py --distributed --gpu_id 0 1     # 2 processes (gloo without CUDA)

Subclass EngineTrainer, fill in its six build_* hooks and call self.build(cfg); run()
trains. Devices, DDP, sharded loaders, checkpoints and resume come with the engine.
Override run_step(inputs) -> (outputs, losses) when a batch is not (inputs, targets).
"""
import argparse
import os

import torch
from torch import nn
from torch.utils.data import TensorDataset

from basetrainer.callbacks import LogHistory, LossesRecorder, ModelCheckpoint
from basetrainer.config import parser_config
from basetrainer.criterion.criterion import get_criterion
from basetrainer.distributed.launch import launch
from basetrainer.engine.trainer import EngineTrainer
from basetrainer.optimizer.build_optimizer import get_optimizer
from basetrainer.scheduler.build_scheduler import get_scheduler
from basetrainer.utils.log import set_logger


def make_data(num_samples, seed):
    x = torch.randn(num_samples, 8, generator=torch.Generator().manual_seed(seed))  # target: sum of sines
    return TensorDataset(x, torch.sin(x).sum(dim=1, keepdim=True))


class RegressionTrainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)  # device, ranks, seed and loop options from cfg
        self.logger = set_logger(level="info", logfile=os.path.join(cfg.work_dir, "log", "train.log"),
                                 is_main_process=self.is_main_process)
        self.build(cfg)  # calls the hooks below, in this order

    def build_train_loader(self, cfg):
        return self.build_dataloader(make_data(4096, seed=0), cfg.batch_size, phase="train")

    def build_test_loader(self, cfg):
        return self.build_dataloader(make_data(1024, seed=1), cfg.batch_size, phase="test", shuffle=False)

    def build_model(self, cfg):
        model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
        return self.build_model_parallel(model, cfg.gpu_id)

    def build_criterion(self, cfg):
        return get_criterion("MSELoss")

    def build_optimizer(self, cfg):
        return get_optimizer(self.model, optim_type="AdamW", lr=cfg.lr, weight_decay=1e-4)

    def build_callbacks(self, cfg):
        return [
            LossesRecorder(indicator="loss"),  # logs["train"]["loss"], logs["test"]["loss"]
            get_scheduler("cosine", self.optimizer, cfg.lr, cfg.num_epochs, self.num_steps, num_warn_up=1),
            LogHistory(os.path.join(cfg.work_dir, "log"), log_freq=20, logger=self.logger, indicators=["loss"],
                       is_main_process=self.is_main_process),
            ModelCheckpoint(model_dir=os.path.join(cfg.work_dir, "model"), epochs=cfg.num_epochs,
                            indicator="loss", mode="min"),  # last.pth, best model, model_final.pth
        ]


def main(cfg):  # runs in every process
    RegressionTrainer(cfg).run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Train a small regression model.")
    parser.add_argument("--work_dir", default="work_dirs/regression")
    parser.add_argument("--num_epochs", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--gpu_id", nargs="+", type=int, default=[0])
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--resume", default=None, help="auto, or a checkpoint path")
    cfg = parser_config(parser.parse_args(), parser=parser)
    launch(main, num_gpus_per_machine=len(cfg.gpu_id), distributed=cfg.distributed, args=(cfg,))
