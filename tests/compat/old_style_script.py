"""A training script written as the earlier library's example taught; the tests run it unchanged.

It imports the old module paths, sets up its folders and logger in ``__init__``, takes its
config from ``parser_config`` with no config file, copies ``cfg.config_file`` into its
work_dir, and starts through ``launch`` with a tcp address of its own::

    python tests/compat/old_style_script.py --train_data D/train --test_data D/val --work_dir W
    python tests/compat/old_style_script.py ... --distributed --gpu_id 0 1     # 2 CPU processes (gloo)
"""
import argparse
import os

from torchvision import transforms
from torchvision.datasets import ImageFolder

from basetrainer.callbacks import log_history, losses_recorder, model_checkpoint
from basetrainer.criterion.criterion import get_criterion
from basetrainer.engine import trainer
from basetrainer.engine.launch import launch
from basetrainer.metric import accuracy_recorder
from basetrainer.models import build_models
from basetrainer.optimizer.build_optimizer import get_optimizer
from basetrainer.scheduler import build_scheduler
from basetrainer.utils import file_utils, log, setup_config, torch_tools


class OldStyleTrainer(trainer.EngineTrainer):
    def __init__(self, cfg):
        super(OldStyleTrainer, self).__init__(cfg)
        torch_tools.set_env_random_seed()
        cfg.model_root = os.path.join(cfg.work_dir, "model")
        cfg.log_root = os.path.join(cfg.work_dir, "log")
        if self.is_main_process:
            file_utils.create_dir(cfg.model_root)
            file_utils.create_dir(cfg.log_root)
            file_utils.copy_file_to_dir(cfg.config_file, cfg.work_dir)
            setup_config.save_config(cfg, os.path.join(cfg.work_dir, "setup_config.yaml"))
        self.logger = log.set_logger(level="info", logfile=os.path.join(cfg.log_root, "train.log"),
                                     is_main_process=self.is_main_process)
        self.build(cfg)
        self.logger.info("num_samples(train):{} num_classes:{}".format(self.num_samples, cfg.num_classes))

    def build_train_loader(self, cfg, **kwargs):
        transform = transforms.Compose([transforms.Resize(cfg.input_size), transforms.RandomHorizontalFlip(),
                                        transforms.ToTensor(), transforms.Normalize([0.5] * 3, [0.5] * 3)])
        dataset = ImageFolder(root=cfg.train_data, transform=transform)
        cfg.num_classes = len(dataset.classes)
        cfg.classes = dataset.classes
        return self.build_dataloader(dataset, cfg.batch_size, cfg.num_workers, phase="train", shuffle=True,
                                     pin_memory=False, drop_last=True, distributed=cfg.distributed)

    def build_test_loader(self, cfg, **kwargs):
        transform = transforms.Compose([transforms.Resize(cfg.input_size), transforms.ToTensor(),
                                        transforms.Normalize([0.5] * 3, [0.5] * 3)])
        dataset = ImageFolder(root=cfg.test_data, transform=transform)
        return self.build_dataloader(dataset, cfg.batch_size, cfg.num_workers, phase="test", shuffle=False,
                                     pin_memory=False, drop_last=False, distributed=cfg.distributed)

    def build_model(self, cfg, **kwargs):
        model = build_models.get_models(net_type=cfg.net_type, input_size=cfg.input_size,
                                        num_classes=cfg.num_classes, pretrained=False)
        return self.build_model_parallel(model, cfg.gpu_id, distributed=cfg.distributed)

    def build_criterion(self, cfg, **kwargs):
        self.logger.info("build_criterion, loss_type:{}".format(cfg.loss_type))
        criterion = get_criterion(cfg.loss_type, cfg.num_classes, device=self.device)
        return criterion

    def build_optimizer(self, cfg, **kwargs):
        self.logger.info("build_optimizer, optim_type:{}, lr:{}".format(cfg.optim_type, cfg.lr))
        optimizer = get_optimizer(self.model, optim_type=cfg.optim_type, lr=cfg.lr, momentum=cfg.momentum,
                                  weight_decay=cfg.weight_decay)
        return optimizer

    def build_callbacks(self, cfg, **kwargs):
        return [
            accuracy_recorder.AccuracyRecorder(target_names=cfg.classes, indicator="Accuracy"),
            losses_recorder.LossesRecorder(indicator="loss"),
            log_history.LogHistory(log_dir=cfg.log_root, log_freq=cfg.log_freq, logger=self.logger,
                                   indicators=["loss", "Accuracy"], is_main_process=self.is_main_process),
            model_checkpoint.ModelCheckpoint(model=self.model, optimizer=self.optimizer, moder_dir=cfg.model_root,
                                             epochs=cfg.num_epochs, start_save=cfg.start_save, indicator="Accuracy",
                                             logger=self.logger),
            build_scheduler.get_scheduler(cfg.scheduler, optimizer=self.optimizer, lr_init=cfg.lr,
                                          num_epochs=cfg.num_epochs, num_steps=self.num_steps,
                                          milestones=cfg.milestones, num_warn_up=cfg.num_warn_up),
        ]

    def run(self, logs: dict = {}):  # noqa: B006 - the old signature, kept on purpose
        self.logger.info("start train")
        super().run(logs)


def main(cfg):
    return OldStyleTrainer(cfg).run()


def get_parser():
    parser = argparse.ArgumentParser(description="Training Pipeline")
    parser.add_argument("-c", "--config_file", help="configs file", default=None, type=str)
    parser.add_argument("--train_data", default="./data/dataset/train", type=str)
    parser.add_argument("--test_data", default="./data/dataset/val", type=str)
    parser.add_argument("--work_dir", default="output", type=str)
    parser.add_argument("--input_size", nargs="+", default=[16, 16], type=int)
    parser.add_argument("--batch_size", default=16, type=int)
    parser.add_argument("--gpu_id", nargs="+", default=[0], type=int)
    parser.add_argument("--num_workers", default=0, type=int)
    parser.add_argument("--num_epochs", default=1, type=int)
    parser.add_argument("--scheduler", default="multi-step", type=str)
    parser.add_argument("--milestones", nargs="+", default=[10, 20], type=int)
    parser.add_argument("--num_warn_up", default=0, type=int)
    parser.add_argument("--net_type", default="mobilenet_v2", type=str)
    parser.add_argument("--loss_type", default="CELoss", type=str)
    parser.add_argument("--optim_type", default="SGD", type=str)
    parser.add_argument("--lr", default=0.05, type=float)
    parser.add_argument("--weight_decay", default=0.0005, type=float)
    parser.add_argument("--momentum", default=0.9, type=float)
    parser.add_argument("--log_freq", default=10, type=int)
    # -1: the latest model, the last epochs' models and the best one, as its users' projects asked;
    # 0: the best model only, as its last example did
    parser.add_argument("--start_save", default=-1, type=int)
    parser.add_argument("--progress", action="store_true", default=False)
    parser.add_argument("--distributed", action="store_true", default=False)
    parser.add_argument("--dist_url", default="tcp://127.0.0.1:28661", type=str)
    return parser


if __name__ == "__main__":
    parser = get_parser()
    cfg = setup_config.parser_config(parser.parse_args(), cfg_updata=True)
    launch(main, num_gpus_per_machine=len(cfg.gpu_id), dist_url=cfg.dist_url, num_machines=1, machine_rank=0,
           distributed=cfg.distributed, args=(cfg,))
