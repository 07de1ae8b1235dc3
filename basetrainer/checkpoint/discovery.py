"""Which checkpoint a run resumes from: the path ``resume`` names, or for ``resume: auto`` the newest run's
``last.pth``, passing over a damaged one to the ``last.prev.pth`` saved before it."""
import glob
import os

from ..distributed import comm
from ..errors import CheckpointError
from ..utils.log import get_logger
from . import files, sharded

logger = get_logger()


def find_checkpoints(resume, known_paths=(), work_dir=None) -> list:
    """The checkpoints ``resume`` names, in the order to try them: none (start afresh), the path
    it names, or for "auto" each run's ``last.pth`` followed by its ``last.prev.pth``, the
    newest run first. The runs are the folders of ``known_paths`` and of every ``last.pth``
    (or ``last.prev.pth``, or sharded ``last/`` directory, see :mod:`.sharded`) under ``work_dir``."""
    if resume is None:
        return []
    if str(resume).lower() != "auto":
        if not (os.path.isfile(str(resume)) or sharded.is_sharded_checkpoint(resume)):
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
    runs += [[path] for path in sharded.find_sharded_checkpoints(known_paths, work_dir)]
    if not runs:
        if comm.is_main_process():
            logger.info("resume: auto found no last.pth; starting from scratch")
        return []
    runs.sort(key=lambda run: max(os.path.getmtime(path) for path in run), reverse=True)
    return [path for run in runs for path in run]


def pick_checkpoint(resume, known_paths=(), work_dir=None):
    """``(path, training state)`` of the checkpoint to resume from, on every rank (the state None for a
    sharded one, which every rank loads itself), or ``(None, None)``. The main process picks it,
    passing over damaged files under ``resume: auto``; an explicit path that does not load is an error."""
    candidates = find_checkpoints(resume, known_paths, work_dir)
    path = saved = None
    if comm.is_main_process() and candidates:
        path, saved = _first_loadable(candidates, auto=str(resume).lower() == "auto")
    path = comm.broadcast_object(path)
    if path is not None and saved is None and not sharded.is_sharded_checkpoint(path):
        saved = files.load_checkpoint(path)
    return path, saved


def _first_loadable(candidates, auto: bool):
    skipped = []
    for path in candidates:
        if sharded.is_sharded_checkpoint(path):
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
