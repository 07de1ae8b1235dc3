"""The model files of the earlier library's ``ModelCheckpoint``, written as it wrote them, for code that loads them.

``ModelCheckpoint(model, optimizer, moder_dir, epochs, ...)``, the folder under its old spelling
``moder_dir``, hands every epoch end to :class:`EarlierCheckpointFiles`, which writes into that
folder, beside ``last.pth``, what the earlier library's last release wrote there. Epochs are
numbered from 0, as its loop passed them; ``<value>`` is the indicator's value, ``{:.4f}``:

- ``model_optimizer.pth``: ``{"epoch": epoch, "model": weights, "optimizer": optimizer.state_dict()}``,
  replaced every epoch;
- ``latest_model_<epoch>_<value>.pth``: the weights; the previous ``latest_*`` file is removed;
- ``model_<epoch>_<value>.pth``: the weights, kept, from epoch ``start_save`` on (``-1``, the
  default: the last ``model_nums`` of ``epochs``);
- ``best_model_<epoch>_<value>.pth``: the weights, when the value is at least as good as the
  best so far (a tie goes to the later epoch), from epoch ``best_save`` on; the previous
  ``best_model_*`` file is removed.

``start_save=0`` keeps the best model only. The value is the indicator's in ``logs["test"]``,
or in ``logs["train"]`` for a run without a test set; a group of losses
(``{"cls": .., "box": .., "total_loss": ..}``) counts as the sum of its terms. Without a value
the names have no ``_<value>`` and no best model is kept.

The weights are a bare ``state_dict`` of the model without wrapper prefixes, on the CPU:
``model.load_state_dict(torch.load(path))`` on the plain model reads them. The model files hold
the weights to ship (an EMA's average when there is one), ``model_optimizer.pth`` the training
weights that its optimizer state belongs to. Under FSDP the optimizer state is sharded, and
``model_optimizer.pth`` is not written (``last/`` holds it).
"""
import math
import os
import re

from ..checkpoint import files as checkpoint_files
from ..distributed import comm
from ..utils.log import get_logger
from ..utils.published import lookup
from .monitor import improves

MODEL_AND_OPTIMIZER = "model_optimizer.pth"
_EPOCH_FILE = re.compile(r"^(?:best_model|latest_model|model)_(\d{3,})(?:_.+)?\.pth$")


class EarlierCheckpointFiles:
    """Writes the earlier library's model files into ``folder`` (see the module docstring).

    ``epochs`` is the length of the run (None: every epoch counts as one of the last
    ``model_nums``); ``mode`` is "max" (higher is better) or "min" (the earlier ``inverse=True``).
    """

    def __init__(self, folder, epochs=None, start_save=-1, best_save=-1, model_nums=10, indicator="", mode="max",
                 logger=None):
        self.folder = str(folder)
        self.epochs = epochs
        self.start_save = start_save
        self.best_save = best_save if best_save is not None else -1
        self.model_nums = model_nums if model_nums is not None else 10
        self.indicator = indicator
        self.mode = mode
        self.logger = logger or get_logger()
        self.best_value = None
        self._warned_no_optimizer = False

    def save(self, epoch: int, logs, weights, training_weights, optimizer_state) -> None:
        """Writes the files of ``epoch`` (numbered from 0). Every rank calls it, the main process writes.

        ``weights`` and ``training_weights`` return the weights to ship and those being trained,
        ``optimizer_state`` the optimizer's ``state_dict`` (None: no ``model_optimizer.pth``); each is
        called on every rank, and only when a file needs it.
        """
        value = indicator_value(logs, self.indicator)
        name = f"model_{epoch:03d}{'' if value is None else f'_{value:.4f}'}.pth"
        files, shipped = {}, None
        if self.start_save != 0:
            files.update(self._model_and_optimizer(epoch, training_weights, optimizer_state))
            shipped = weights()
            files[f"latest_{name}"] = shipped
            if epoch >= self._first_kept_epoch():
                files[name] = shipped
        if value is not None and epoch >= self.best_save and self._at_least_as_good(value):
            files[f"best_model_{epoch:03d}_{value:.4f}.pth"] = weights() if shipped is None else shipped
            self.best_value = value
        if comm.is_main_process():
            for file_name, content in files.items():
                checkpoint_files.save_checkpoint(content, os.path.join(self.folder, file_name))
                self.logger.info("save model: %s", os.path.join(self.folder, file_name))
            self._remove_replaced(files)
        comm.synchronize()

    def remove_files_from(self, epoch: int) -> None:
        """Removes the model files of ``epoch`` and later: a resumed run trains those epochs again,
        and a run killed after writing them may have left files its restored state does not know."""
        if not comm.is_main_process() or not os.path.isdir(self.folder):
            return
        for file_name in os.listdir(self.folder):
            match = _EPOCH_FILE.match(file_name)
            if match and int(match.group(1)) >= epoch:
                self.logger.info("removing %s, left by an interrupted run", os.path.join(self.folder, file_name))
                os.remove(os.path.join(self.folder, file_name))

    def state_dict(self) -> dict:
        return {"best_value": self.best_value}

    def load_state_dict(self, state: dict) -> None:
        self.best_value = state.get("best_value")

    def _first_kept_epoch(self) -> int:
        if self.start_save >= 0:
            return self.start_save
        return self.epochs - self.model_nums if self.epochs is not None else 0

    def _model_and_optimizer(self, epoch, training_weights, optimizer_state) -> dict:
        optimizer = optimizer_state()
        if optimizer is None:
            if not self._warned_no_optimizer:
                self.logger.warning("ModelCheckpoint: no %s is written: there is no optimizer, or its state is "
                                    "sharded (FSDP; last/ holds it)", MODEL_AND_OPTIMIZER)
                self._warned_no_optimizer = True
            return {}
        return {MODEL_AND_OPTIMIZER: {"epoch": epoch, "model": training_weights(), "optimizer": optimizer}}

    def _at_least_as_good(self, value: float) -> bool:
        if math.isnan(value):
            return False
        return self.best_value is None or value == self.best_value or improves(value, self.best_value, self.mode)

    def _remove_replaced(self, written) -> None:
        """Removes the ``latest_*`` and ``best_model_*`` files that those just written replace."""
        for prefix in ("latest_", "best_model_"):
            if not any(file_name.startswith(prefix) for file_name in written):
                continue
            for file_name in os.listdir(self.folder):
                if file_name.startswith(prefix) and file_name.endswith(".pth") and file_name not in written:
                    os.remove(os.path.join(self.folder, file_name))


def warn_unused_keywords(earlier_way: bool, save_best_k, best_save, model_nums, logger) -> None:
    """Warns of the keywords that one way of constructing ``ModelCheckpoint`` takes and the other ignores."""
    if earlier_way and save_best_k != 1:
        logger.warning("ModelCheckpoint(moder_dir=...): save_best_k=%s is ignored: the earlier library's files keep "
                       "one best model (construct it with model_dir= to keep the best k)", save_best_k)
    if not earlier_way and (best_save is not None or model_nums is not None):
        logger.warning("ModelCheckpoint(model_dir=...): best_save and model_nums are ignored: they choose the earlier "
                       "library's files, written when the folder is given as moder_dir= (with model_dir=, start_save "
                       "is the first epoch of the best models and save_best_k how many are kept)")


def indicator_value(logs, indicator: str):
    """The number the earlier library watched: ``indicator`` in ``logs["test"]`` (in ``logs["train"]``
    when there is no test result), a loss group summed over its terms; None when absent."""
    if not indicator:
        return None
    values = (logs or {}).get("test") or (logs or {}).get("train") or {}
    group = values.get(indicator) if isinstance(values, dict) else None
    if isinstance(group, dict):
        # The earlier MultiLossesRecorder adds "total_<name>" to a group: counting it would double the sum.
        terms = [lookup(group, key) for key in group if not str(key).startswith("total_")]
        terms = [term for term in terms if term is not None]
        return float(sum(terms)) if terms else None
    return lookup(values, indicator)
