"""Hyper-parameter search: Optuna (:mod:`.optuna`) and NNI's trial API (:mod:`.nni`), one module per library.

Both report the evaluated indicator after every evaluation (:mod:`.reporting`) and run each
trial of the classification task in this process, in a work_dir of its own
(:mod:`.classification`). The libraries are extras: ``pip install "basetrainer[hpo]"`` for
Optuna, ``"basetrainer[nni]"`` for NNI; without its library, importing :mod:`.optuna` or
running an NNI trial is a one-line error naming that command.
"""
import importlib
import importlib.util

from ..errors import ConfigError


def import_extra(package: str, extra: str):
    """Imports ``package``; when it is not installed, a one-line error naming the pip command."""
    if importlib.util.find_spec(package) is None:
        raise ConfigError(f'hyper-parameter search with {package} needs the {package} package: '
                          f'pip install "basetrainer[{extra}]"')
    return importlib.import_module(package)
