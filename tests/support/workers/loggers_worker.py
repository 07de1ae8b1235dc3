"""The 2-process job of the logger tests: every logger (TensorBoard, history files, MLflow, W&B) on 2 gloo processes.

Both ranks build the same callbacks; LogHistory writes from rank 0 only, into OUT_DIR
(MLflow's local store and W&B's offline files too; run it with ``WANDB_MODE=offline``)::

    python tests/workers/loggers_worker.py OUT_DIR
"""
import sys

from metrics_worker import ClassifierTrainer, cfg


def main(out_dir):
    from basetrainer.callbacks.log_history import LogHistory
    from basetrainer.callbacks.losses_recorder import LossesRecorder
    from basetrainer.loggers import build_loggers

    def callbacks():
        loggers = build_loggers(["tensorboard", "csv", "mlflow", "wandb"], out_dir, {"work_dir": out_dir})
        return [LossesRecorder(), LogHistory(out_dir, log_freq=2, loggers=loggers, plot=False)]

    ClassifierTrainer(cfg(batch_size=8, callbacks=callbacks)).run()


if __name__ == "__main__":
    from basetrainer.distributed.launch import launch

    launch(main, 2, args=(sys.argv[1],))
