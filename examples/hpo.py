"""Hyper-parameter search with Optuna: trials of the classification example, one after another in this process.

    pip install -e ".[hpo]"
    python examples/hpo.py --trials 20                        # lr, weight_decay, batch_size; 3 epochs a trial
    python examples/hpo.py --trials 3 num_epochs=1 'input_size=[16,16]'  # then any key of configs/config.yaml
    optuna-dashboard sqlite:///work_dirs/hpo/study.db         # the study in a browser (pip install optuna-dashboard)

Each trial trains the pipeline of examples/example.py (the handwritten digits unless the
data is named) with the values Optuna suggests, in work_dir/trial_<n>. The study lives in
work_dir/study.db (SQLite), so running the script again adds trials to the same study.
After every evaluation the trial's test accuracy goes to Optuna; its median pruner stops
a trial that falls behind the trials before it, and a trial whose loss turns NaN counts as
failed without ending the search. At the end the best trial's config is printed: train it
again with `python examples/example.py -c work_dir/trial_<n>/config.yaml`.
"""
import argparse
import os
import sys

from basetrainer.errors import BaseTrainerError, NonFiniteLossError
from basetrainer.hpo.classification import run_trial, trial_config
from basetrainer.utils.console import exit_with

try:
    from basetrainer.hpo.optuna import OptunaPruning, optuna
except BaseTrainerError as missing:  # optuna is not installed: one line naming the pip command
    exit_with(missing)

DEFAULTS = ["num_epochs=3"]  # before the user's settings, which win


def search_space(trial) -> dict:
    """The config keys searched, with the values Optuna suggests for ``trial``."""
    return {
        "lr": trial.suggest_float("lr", 1e-3, 0.3, log=True),
        "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-3, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [32, 64, 128]),
    }


def objective(trial, task_argv):
    """Trains one trial; returns its last test accuracy, or raises optuna.TrialPruned."""
    cfg = trial_config(task_argv, search_space(trial), f"trial_{trial.number}")
    trial.set_user_attr("config", os.path.join(cfg.work_dir, "config.yaml"))
    pruning = OptunaPruning(trial, indicator="Acc")
    run_trial(cfg, callbacks=[pruning])
    pruning.raise_if_pruned()
    return pruning.final_value


def search(args, task_argv):
    os.makedirs(args.work_dir, exist_ok=True)
    storage = "sqlite:///" + os.path.abspath(os.path.join(args.work_dir, "study.db"))
    study = optuna.create_study(study_name=args.study, storage=storage, direction="maximize", load_if_exists=True,
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=3))
    task_argv = [*DEFAULTS, *task_argv, f"--work_dir={args.work_dir}"]
    study.optimize(lambda trial: objective(trial, task_argv), n_trials=args.trials, catch=(NonFiniteLossError,))
    return study


def report(study):
    """Prints the best trial and its config; returns the exit code (1: no trial finished)."""
    states = [trial.state.name.lower() for trial in study.trials]
    counts = ", ".join(f"{states.count(state)} {state}" for state in sorted(set(states)))
    if "complete" not in states:
        print(f"no trial finished ({counts})", file=sys.stderr)
        return 1
    best = study.best_trial
    values = ", ".join(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
                       for key, value in best.params.items())
    print(f"study {study.study_name}: {len(states)} trials ({counts})")
    print(f"best trial {best.number}: Acc {best.value:.2f} with {values}")
    print(f"its config, {best.user_attrs['config']}:")
    with open(best.user_attrs["config"], encoding="utf-8") as stream:
        print(stream.read(), end="")
    return 0


def get_parser():
    """The search's own flags; every other argument is the example's (``parse_known_args``)."""
    parser = argparse.ArgumentParser(description="Optuna search over the classification example's config.",
                                     epilog="Other arguments (flags and key=value) are the example's: "
                                            "python examples/example.py --help lists them.")
    parser.add_argument("--trials", type=int, default=20, help="trials to run (added to the study's earlier ones)")
    parser.add_argument("--study", default="classification", help="the study's name in the storage")
    parser.add_argument("--work_dir", default="work_dirs/hpo", help="the study's folder: study.db and trial_<n>/")
    return parser


def main(argv=None):
    args, task_argv = get_parser().parse_known_args(argv)
    try:
        study = search(args, task_argv)
    except BaseTrainerError as error:
        exit_with(error)
    sys.exit(report(study))


if __name__ == "__main__":
    main()
