"""The whole training state: what ``last.pth`` holds, how it is read back, and which one ``resume`` picks.

A training state holds only tensors, numbers, strings, lists and dicts (see
:mod:`basetrainer.engine.checkpoint`), so it loads with ``weights_only=True``.
"""
import glob
import os

from .. import __version__
from ..checkpoint import files, weights
from ..checkpoint import sharded as sharded_checkpoint
from ..checkpoint.rng import get_rng_state, set_rng_state
from ..config import to_plain
from ..distributed import comm
from ..errors import CheckpointError
from ..parallel import unwrap_model
from ..utils.log import get_logger
from ..utils.seeding import seed_everything
from . import elastic

logger = get_logger()

# Settings that change what the remaining steps do: a resume that changes one is no exact continuation.
RUN_SETTINGS = ("num_epochs", "lr", "batch_size", "optim_type", "momentum", "weight_decay", "loss_type",
                "scheduler", "milestones", "num_warn_up", "accumulate_grad_batches", "clip_grad_norm", "amp")


def training_state(trainer, with_weights: bool = True) -> dict:
    """Everything an exact continuation needs. Every rank calls it (it gathers the ranks'
    RNG states); only the main process need write it. ``with_weights=False`` leaves out the
    model and the optimizer (a sharded checkpoint saves those itself)."""
    state = trainer.state
    epoch, batch = state.resume_position()
    saved = {
        "basetrainer_version": __version__,
        "epoch": epoch,
        "batch": batch,
        "iteration": state.global_step,
        "last_eval_step": state.last_eval_step,
        "evaluation_pending": state.evaluation_pending,
        "samples_seen": state.samples_seen,
        "world_size": trainer.world_size,
        **elastic.layout(trainer),
        "scaler": trainer.scaler.state_dict() if trainer.scaler is not None else None,
        "callbacks": {key: cb.state_dict() for key, cb in keyed_callbacks(trainer.callbacks)
                      if hasattr(cb, "state_dict")},
        "rng": comm.all_gather(get_rng_state()),
        "loss_tally": state.loss_tally.state_dict(),
        "config": to_plain(trainer.cfg),
    }
    spec = getattr(unwrap_model(trainer.model), "pruning_spec", None)
    if spec is not None:
        saved["architecture"] = spec
    if with_weights:
        saved.update(model=trainer.strategy.model_state_dict(trainer.model), optimizer=trainer.optimizer.state_dict())
    return saved


def save_training_state(trainer, path) -> str:
    """Writes ``trainer``'s training state to ``path``: on the main process, atomically, the file it
    replaces kept as the previous one (``last.prev.pth``) with both checksums; a sharded
    directory written by every rank under FSDP or ``async_checkpoint``. Every rank calls it."""
    trainer.state.loss_tally.fold()  # never replace a good checkpoint by NaN weights
    if path == trainer.checkpoint_path:
        trainer.saved_position = position(trainer)
    if sharded_checkpoint.wanted(trainer.strategy, trainer.options):  # FSDP, async: each rank writes its shards
        return trainer.sharded_checkpointer.save(trainer.model, trainer.optimizer, path,
                                                 training_state(trainer, with_weights=False))
    saved = trainer.state_dict()
    if trainer.is_main_process:
        files.save_checkpoint(saved, path, keep_previous=True)
    comm.synchronize()
    return path


def position(trainer) -> tuple:
    """Where a training state saved now resumes: equal positions, equal checkpoints."""
    state = trainer.state
    return (*state.resume_position(), state.global_step, state.evaluation_pending)


def load_training_state(trainer, saved: dict, name: str = "the checkpoint", with_weights: bool = True) -> None:
    """Puts ``saved`` (a :func:`training_state`) back into ``trainer`` (``with_weights=False``:
    all but the model and the optimizer, which a sharded checkpoint has loaded itself).

    The RNG states and the interrupted epoch's loss sums wait in ``trainer.pending_restore``
    until the loop has positioned the loader, so that skipped batches draw nothing.
    """
    for key in ("model", "optimizer", "epoch", "batch") if with_weights else ("epoch", "batch"):
        if key not in saved:
            raise CheckpointError(f"{name} is not a full training checkpoint (no '{key}'); "
                                  f"use finetune to load weights only")
    if with_weights:
        model_state = {weights.strip_prefixes(k): v for k, v in saved["model"].items()}
        weights.check_shapes(trainer.model, model_state, name)
        trainer.strategy.load_model_state_dict(trainer.model, model_state)
        trainer.optimizer.load_state_dict(saved["optimizer"])
    if trainer.scaler is not None and saved.get("scaler"):
        trainer.scaler.load_state_dict(saved["scaler"])
    callback_states = saved.get("callbacks", {})
    for key, cb in keyed_callbacks(trainer.callbacks):
        if not hasattr(cb, "load_state_dict"):
            continue
        if key in callback_states:
            cb.load_state_dict(callback_states[key])
        else:
            logger.warning("%s holds no state for callback %s; it starts afresh", name, key)
    state = trainer.state
    state.start_epoch, state.start_batch = int(saved["epoch"]), int(saved["batch"])
    elastic.adapt(trainer, saved, name)  # another number of processes: the same global batch and samples
    state.global_step = int(saved.get("iteration", 0))
    state.last_eval_step = int(saved.get("last_eval_step", -1))
    state.evaluation_pending = saved.get("evaluation_pending")
    state.samples_seen = int(saved.get("samples_seen", 0))
    if trainer.is_main_process:
        warn_changed_settings(saved.get("config"), to_plain(trainer.cfg), name)
    rng = saved.get("rng") or []
    if len(rng) != trainer.world_size:
        logger.warning("%s was written by %d process(es), this run has %d: random streams are reseeded, "
                       "so the continuation is not bit-exact", name, len(rng), trainer.world_size)
        seed_everything(trainer.seed + trainer.rank + 7919 * state.start_epoch)
    trainer.pending_restore = {"rng": rng[trainer.rank] if len(rng) == trainer.world_size else None,
                               "loss_tally": saved.get("loss_tally")}


def resume_or_seed(trainer) -> None:
    """Loads the checkpoint ``resume`` names into ``trainer`` and says where training goes on;
    without one, seeds every rank's random streams differently, from the one seed."""
    path, saved = _load_first_good(trainer)
    if path is None:
        seed_everything(trainer.seed + trainer.rank)  # dropout, augmentation: per rank, reproducibly
        return
    if saved is None:  # a sharded checkpoint: model and optimizer go straight into their shards
        saved = trainer.sharded_checkpointer.load(trainer.model, trainer.optimizer, path)
        load_training_state(trainer, saved, name=path, with_weights=False)
    else:
        load_training_state(trainer, saved, name=path)
    state = trainer.state
    if not trainer.is_main_process:
        return
    if state.finished:
        logger.warning("%s is a finished run: all %d steps are trained, so there is nothing to do; to train "
                       "longer, raise max_iters and resume again", path, state.max_steps)
    elif state.start_epoch >= state.max_epochs and state.max_steps is None:
        logger.warning("%s is a finished run: all %d epochs are trained, so there is nothing to do; to train "
                       "longer, raise num_epochs and resume again", path, state.max_epochs)
    elif state.start_batch:
        logger.info("resumed from %s in epoch %d, after its first %d batches", path, state.start_epoch + 1,
                    state.start_batch)
    else:
        logger.info("resumed from %s at the start of epoch %d", path, state.start_epoch + 1)


def _load_first_good(trainer):
    """``(path, training state)`` of the checkpoint to resume from (the state None for a sharded
    one), or ``(None, None)``. The main process picks it, passing over damaged files under
    ``resume: auto``, and every rank then loads the one it picked."""
    resume = trainer.options.resume
    if resume is None and int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0:
        resume = "auto"  # a SLURM job requeued (by a stop signal, see preemption) goes on where it stopped
    candidates = find_checkpoints(resume, [trainer.checkpoint_path], trainer.options.work_dir)
    path = saved = None
    if trainer.is_main_process and candidates:
        path, saved = _first_loadable(candidates, auto=str(resume).lower() == "auto")
    path = comm.broadcast_object(path)
    if path is not None and saved is None and not sharded_checkpoint.is_sharded_checkpoint(path):
        saved = files.load_checkpoint(path)
    return path, saved


def _first_loadable(candidates, auto: bool):
    """The first of ``candidates`` that loads, and its state (None for a sharded checkpoint, which
    loads on every rank); an explicit ``resume`` path that does not load is an error."""
    skipped = []
    for path in candidates:
        if sharded_checkpoint.is_sharded_checkpoint(path):
            return path, None
        try:
            saved = files.load_checkpoint(path)
        except CheckpointError as error:
            if not auto:
                raise
            logger.warning("resume: auto passes over %s: %s", path, error)
            skipped.append(path)
            continue
        if skipped:
            logger.warning("resume: auto resumes from %s, the checkpoint saved before %s", path, skipped[-1])
        return path, saved
    raise CheckpointError(f"resume: auto found checkpoints but none loads ({', '.join(skipped)}); "
                          f"resume from a copy, or move them away to start afresh")


def start_epoch_tally(trainer) -> None:
    """A new epoch's loss sums, or, after a mid-epoch resume, the interrupted epoch's."""
    state = trainer.state
    state.loss_tally.start_epoch(state.epoch, state.start_batch)
    saved = (trainer.pending_restore or {}).pop("loss_tally", None)
    if saved is not None and state.start_batch:
        state.loss_tally.load_state_dict(saved, trainer.device)


def restore_rng(trainer) -> None:
    """Puts back the random streams of the resumed run (once; the loop calls it after positioning the loader)."""
    rng = (trainer.pending_restore or {}).pop("rng", None)
    if rng is not None:
        set_rng_state(rng)


def warn_changed_settings(saved, now, name) -> None:
    """Names the training settings that differ from those ``name`` was written with."""
    if not isinstance(saved, dict):
        return
    changed = [f"{key} {saved[key]!r} -> {now[key]!r}" for key in RUN_SETTINGS
               if key in saved and key in now and saved[key] != now[key]]
    if changed:
        logger.warning("%s was written with other settings (%s): training goes on with the new ones, "
                       "so it does not continue the old run exactly", name, ", ".join(changed))


def find_checkpoints(resume, known_paths=(), work_dir=None) -> list:
    """The checkpoints ``resume`` names, in the order to try them: none (start afresh), the path
    it names, or for "auto" each run's ``last.pth`` followed by its ``last.prev.pth``, the
    newest run first. The runs are the folders of ``known_paths`` and of every ``last.pth``
    (or ``last.prev.pth``, or sharded ``last/`` directory, see :mod:`.sharded_checkpoint`)
    under ``work_dir``."""
    if resume is None:
        return []
    if str(resume).lower() != "auto":
        if not (os.path.isfile(str(resume)) or sharded_checkpoint.is_sharded_checkpoint(resume)):
            raise CheckpointError(f"resume: no checkpoint at {resume}; check the path, or use resume: auto")
        return [str(resume)]
    lasts = {p for p in known_paths if p}
    if work_dir:
        found = glob.glob(os.path.join(glob.escape(str(work_dir)), "**", "last*.pth"), recursive=True)
        lasts.update(path for path in found if os.path.basename(path) == "last.pth")
        lasts.update(os.path.join(os.path.dirname(path), "last.pth") for path in found
                     if os.path.basename(path) == "last.prev.pth")
    runs = [[path for path in (last, files.previous_path(last)) if os.path.isfile(path)] for last in lasts]
    runs = [run for run in runs if run]
    runs += [[path] for path in sharded_checkpoint.find_sharded_checkpoints(known_paths, work_dir)]
    if not runs:
        if comm.is_main_process():
            logger.info("resume: auto found no last.pth; starting from scratch")
        return []
    runs.sort(key=lambda run: max(os.path.getmtime(path) for path in run), reverse=True)
    return [path for run in runs for path in run]


def keyed_callbacks(callbacks):
    """``(key, callback)`` pairs: a callback's state is stored under its position and class name."""
    return [(f"{i}:{type(cb).__name__}", cb) for i, cb in enumerate(callbacks)]
