"""Optuna: a callback that reports each evaluation to a trial and stops the trials Optuna prunes.

::

    def objective(trial):
        lr = trial.suggest_float("lr", 1e-3, 0.3, log=True)
        cfg = trial_config(["num_epochs=5", "work_dir=work_dirs/hpo"], {"lr": lr},
                           f"trial_{trial.number}")
        pruning = OptunaPruning(trial, indicator="Acc")
        run_trial(cfg, callbacks=[pruning])
        pruning.raise_if_pruned()
        return pruning.final_value

    study = optuna.create_study(direction="maximize", storage="sqlite:///work_dirs/hpo/study.db")
    study.optimize(objective, 20)

``examples/hpo.py`` is this, complete. Needs ``pip install "basetrainer[hpo]"``.
"""
from . import import_extra
from .reporting import EvaluationReporter

optuna = import_extra("optuna", "hpo")


class OptunaPruning(EvaluationReporter):
    """Reports ``indicator`` to ``trial`` after every evaluation, and stops training when Optuna prunes it.

    After each evaluation: ``trial.report(value, step)`` (``step``: see
    :class:`~basetrainer.hpo.reporting.EvaluationReporter`), then ``trial.should_prune()``.
    A pruned trial asks the trainer to stop (``trainer.request_stop()``): the epoch ends as
    usual, its checkpoint and logs are written, and ``run()`` returns. The objective then
    calls :meth:`raise_if_pruned`, whose ``optuna.TrialPruned`` makes ``study.optimize``
    record the trial as pruned. Raising from inside the loop instead would end the run as
    a failure (``on_exception``), with its files cut short.
    """

    def __init__(self, trial, indicator: str = "Acc"):
        super().__init__(indicator)
        self.trial = trial
        self.pruned_at = None

    def report(self, value, step):
        self.trial.report(value, step)
        if self.trial.should_prune():
            self.pruned_at = step
            self.trainer.request_stop()

    def raise_if_pruned(self) -> None:
        """Raises ``optuna.TrialPruned`` when the trial was pruned; call it after ``trainer.run()``."""
        if self.pruned_at is not None:
            raise optuna.TrialPruned(f"pruned at step {self.pruned_at}: {self.indicator} {self.final_value:.6g}")
