"""A run whose LogHistory is handed W&B and the history files directly, with no check before it starts (as a
user's own trainer may do): where W&B cannot start, the run goes on without it::

    python tests/support/workers/unchecked_tracker_worker.py LOG_DIR
"""
import sys

from metrics_worker import ClassifierTrainer, cfg


def main(log_dir):
    from basetrainer.callbacks.log_history import LogHistory
    from basetrainer.callbacks.losses_recorder import LossesRecorder
    from basetrainer.utils.log import set_logger

    set_logger("info")
    def callbacks():
        return [LossesRecorder(), LogHistory(log_dir, loggers=["wandb", "csv"])]

    ClassifierTrainer(cfg(num_epochs=2, callbacks=callbacks)).run()


if __name__ == "__main__":
    main(sys.argv[1])
