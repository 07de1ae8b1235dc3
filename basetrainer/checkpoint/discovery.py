"""Which checkpoint a run resumes from: the path ``resume`` names, or for ``resume: auto`` the newest run's
``last.pth``, passing over a damaged one to the ``last.prev.pth`` saved before it.

Finding sharded checkpoints (:mod:`.sharded`) only looks at files: it does not import
``torch.distributed.checkpoint``, which a run that writes none never needs."""
import glob
import os

from ..distributed import comm
from ..errors import CheckpointError
from ..utils.log import get_logger
from . import files

logger = get_logger()
METADATA_FILE = ".metadata"  # the index of a sharded (DCP) checkpoint, written last


def find_checkpoints(resume, known_paths=(), work_dir=None, written_since=None) -> list:
    """The checkpoints ``resume`` names, in the order to try them: none (start afresh), the path
    it names, or for "auto" each run's ``last.pth`` followed by its ``last.prev.pth``, the
    newest run first. The runs are the folders of ``known_paths`` and of every ``last.pth``
    (or ``last.prev.pth``, or sharded ``last/`` directory, see :mod:`.sharded`) under ``work_dir``;
    with ``written_since`` (seconds since the epoch), "auto" passes over those written before."""
    if resume is None:
        return []
    if str(resume).lower() != "auto":
        if not (os.path.isfile(str(resume)) or is_sharded_checkpoint(resume)):
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
    runs += [[path] for path in find_sharded_checkpoints(known_paths, work_dir)]
    if written_since is not None:
        earlier = sum(1 for run in runs for path in run if _written_at(path) < written_since)
        runs = [kept for kept in ([path for path in run if _written_at(path) >= written_since] for run in runs) if kept]
        if earlier and comm.is_main_process():
            logger.info("resume: auto passes over %d checkpoint(s) written before this job started (another job's)",
                        earlier)
    if not runs:
        if comm.is_main_process():
            logger.info("resume: auto found no last.pth; starting from scratch")
        return []
    runs.sort(key=lambda run: max(os.path.getmtime(path) for path in run), reverse=True)
    return [path for run in runs for path in run]


def _written_at(path) -> float:
    """When a checkpoint was written: its file's time, or a sharded one's index (written last)."""
    index = os.path.join(path, METADATA_FILE)
    return os.path.getmtime(index if os.path.isdir(path) and os.path.exists(index) else path)


def pick_checkpoint(resume, known_paths=(), work_dir=None, written_since=None):
    """``(path, training state)`` of the checkpoint to resume from, on every rank (the state None for a
    sharded one, which every rank loads itself), or ``(None, None)``. The main process picks it,
    passing over damaged files under ``resume: auto``; an explicit path that does not load is an error."""
    candidates = find_checkpoints(resume, known_paths, work_dir, written_since)
    path = saved = None
    if comm.is_main_process() and candidates:
        path, saved = _first_loadable(candidates, auto=str(resume).lower() == "auto")
    path = comm.broadcast_object(path)
    if path is not None and saved is None and not is_sharded_checkpoint(path):
        saved = files.load_checkpoint(path)
    return path, saved


def _first_loadable(candidates, auto: bool):
    skipped = []
    for path in candidates:
        if is_sharded_checkpoint(path):
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


def checkpoint_directory(path) -> str:
    """The sharded checkpoint written where ``path`` names a file: ``model/last.pth`` -> ``model/last``."""
    root, extension = os.path.splitext(str(path))
    return root if extension == ".pth" else str(path)


def is_sharded_checkpoint(path) -> bool:
    """Whether ``path`` is a complete DCP checkpoint directory (or a link to one)."""
    return path is not None and os.path.isfile(os.path.join(str(path), METADATA_FILE))


def find_sharded_checkpoints(known_paths=(), work_dir=None) -> list:
    """The complete sharded checkpoints beside ``known_paths`` (``last.pth`` -> ``last``) and named ``last`` under
    ``work_dir``."""
    found = [checkpoint_directory(path) for path in known_paths if path]
    if work_dir:
        found += glob.glob(os.path.join(str(work_dir), "**", "last"), recursive=True)
    return [path for path in set(found) if is_sharded_checkpoint(path)]
