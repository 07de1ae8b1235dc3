"""NNI's trial API for the classification task: ``python -m basetrainer.hpo.nni`` is an experiment's trial command.

::

    # nni.yml, then: nnictl create --config nni.yml
    searchSpace:
      lr: {_type: loguniform, _value: [0.001, 0.3]}
      weight_decay: {_type: loguniform, _value: [0.000001, 0.001]}
      batch_size: {_type: choice, _value: [32, 64, 128]}
    trialCommand: >-
      python -m basetrainer.hpo.nni -c configs/config.yaml num_epochs=5 work_dir=work_dirs/nni
    trialCodeDirectory: .
    trialConcurrency: 1
    maxTrialNumber: 20
    tuner: {name: TPE, classArgs: {optimize_mode: maximize}}
    trainingService: {platform: local}

A trial takes ``nni.get_next_parameter()`` (config key -> value) over the config it is
given, trains in ``<work_dir>/<experiment id>/trial_<trial number>``, reports the test
accuracy (``Acc``) after every evaluation (``nni.report_intermediate_result``) and the last
one at the end (``nni.report_final_result``). Run outside an experiment (NNI's standalone
mode), ``get_next_parameter`` returns ``{}`` with a warning, the trial trains the config
as given in ``<work_dir>/STANDALONE/trial_0``, and NNI logs the results it would report.
Needs ``pip install "basetrainer[nni]"``.
"""
import os
import sys

from ..errors import BaseTrainerError
from ..utils.console import exit_with
from ..utils.log import set_logger
from . import import_extra
from .classification import run_trial, trial_config
from .reporting import EvaluationReporter


class NNIReporter(EvaluationReporter):
    """Reports ``indicator`` to NNI after every evaluation, and its last value when training ends."""

    def __init__(self, indicator: str = "Acc"):
        super().__init__(indicator)
        self.nni = import_extra("nni", "nni")

    def report(self, value, step):
        self.nni.report_intermediate_result(value)

    def on_train_end(self, logs=None):
        if self.final_value is not None:
            self.nni.report_final_result(self.final_value)


def main(argv=None):
    """Runs one NNI trial of the classification task with ``argv`` (default ``sys.argv[1:]``)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        nni = import_extra("nni", "nni")  # here, so that without it the trial command prints one line
        set_logger(level="info")
        params = nni.get_next_parameter() or {}
        cfg = trial_config(argv, params, os.path.join(nni.get_experiment_id(), f"trial_{nni.get_sequence_id()}"))
        run_trial(cfg, callbacks=[NNIReporter("Acc")])
    except BaseTrainerError as error:
        exit_with(error)


if __name__ == "__main__":
    main()
