"""Evaluation over every test set, and prediction in dataset order, gathered over ranks."""
from contextlib import nullcontext

import torch

from ..checkpoint.rng import get_rng_state
from ..data import loaders as data
from ..distributed import comm
from ..utils.batch import total_loss
from .events import Event


class EvaluationStopped(Exception):
    """A stop signal ended an evaluation early; ``rng`` holds the random streams as it found them."""

    def __init__(self, rng):
        super().__init__("evaluation abandoned after a stop signal")
        self.rng = rng


def test_sets(test_loader):
    """``[(name, loader)]``: a dict of loaders as given, one loader as ``[(None, loader)]``, None as ``[]``."""
    if test_loader is None:
        return []
    if isinstance(test_loader, dict):
        return list(test_loader.items())
    return [(None, test_loader)]


def evaluate(sets, model, step, events, state, logs: dict, *, to_device, watchdog, stop_after, strategy) -> None:
    """One evaluation of ``model`` over ``sets`` (see :func:`test_sets`): ``on_test_begin``, the batches,
    ``on_test_end`` for each test set, then ``on_evaluation_end``. ``to_device(inputs)`` moves a batch to
    the device, and ``on_test_summary`` sees it there, as ``on_train_summary`` does; ``step(inputs)``
    gives its ``(outputs, losses)`` (under autocast; ``losses`` None for a model that computes none in eval
    mode, as torchvision's detectors, which return their predictions only); ``stop_after(loader)`` is the rule
    that says after which test batch a stop signal ends the evaluation (see :mod:`.preemption`).
    From the parallel ``strategy``: the weights evaluated (``averaged_weights``: the replicas'
    average where they differ, under local SGD, for the whole evaluation and its events) and how
    many forwards this rank adds after its last batch so that every rank runs as many
    (``evaluation_padding``: needed where a forward is a collective, as under FSDP).

    Recorders publish each set's values in ``logs["test"]``; with several sets, ``logs["test"]``
    then holds them by name (``logs["test"]["val"]["Acc"]``).

    A stop signal abandons it after a test batch: the set's ``on_test_end`` fires with a scratch
    ``logs`` and ``state.evaluation_abandoned`` set (callbacks undo what ``on_test_begin`` did,
    e.g. EMA puts the training weights back; the accuracy line is not logged), ``logs["test"]``
    keeps the previous evaluation's values, no ``on_evaluation_end`` fires, and
    ``EvaluationStopped`` is raised.
    """
    sets = sets or [(None, None)]  # the events fire even without a test loader
    found = (get_rng_state(), logs["test"])  # what an abandoned evaluation goes back to
    results = {}
    weights = strategy.averaged_weights(model) if any(loader is not None for _, loader in sets) else nullcontext()
    with watchdog.phase("evaluation"), weights:
        for name, loader in sets:
            state.eval_set = name
            logs["test"] = {}
            events.fire(Event.TEST_BEGIN, logs)
            if loader is not None and not _test_batches(loader, model, to_device, step, events, state, logs,
                                                        watchdog, stop_after(loader),
                                                        strategy.evaluation_padding(loader)):
                state.evaluation_abandoned = True
                try:
                    events.fire(Event.TEST_END, {**logs, "test": {}})
                finally:
                    state.evaluation_abandoned = False
                state.eval_set, logs["test"] = None, found[1]
                raise EvaluationStopped(found[0])
            events.fire(Event.TEST_END, logs)
            results[name] = logs["test"]
    state.eval_set = None
    logs["test"] = results if len(sets) > 1 else results[sets[0][0]]
    state.last_eval_step = state.global_step
    events.fire(Event.EVALUATION_END, logs)


def _test_batches(loader, model, to_device, step, events, state, logs, watchdog, stop_after, padding) -> bool:
    """Evaluates ``loader``'s batches; returns False when a stop signal ended it early (on every
    rank after the same batch)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for batch, inputs in enumerate(data.iterate(loader)):
            inputs = to_device(inputs)
            outputs, losses = step(inputs)
            state.loss = None if losses is None else total_loss(losses)  # None: a model with no loss in eval mode
            events.fire(Event.TEST_SUMMARY, inputs, outputs, losses, state.epoch, batch, logs)
            watchdog.beat()
            if stop_after(batch):
                model.train(was_training)
                return False
        for _ in range(padding):  # its all-gathers pair with the other ranks'; its outputs count nowhere
            step(inputs)
    model.train(was_training)
    return True


def predict(loader, model, step, strategy):
    """``step(inputs)``'s outputs (the trainer's ``predict_step``, on the device, under autocast) for
    every sample of ``loader``, in dataset order, on every rank (CPU tensors; a tuple, list or dict
    of them when the step returns one; a list of one dict per sample when the step returns that, as a
    detector's boxes, scores and labels, of a different length for each image); the parallel
    ``strategy``'s weights and padding, as in evaluation.

    Under several processes each rank predicts its shard and the rows are gathered and
    put back where the sampler's indices say; the duplicates a padding sampler adds land
    on their own rows, so 101 samples over 2 ranks give the same 101 rows as 1 process.
    A loader whose order cannot be known in advance (a random sampler, an iterable
    dataset) gives the ranks' rows one rank after the other. The loader's worker processes
    end with the prediction, however it ends.
    """
    order, rows, was_training = data.sample_order(loader), [], model.training
    padding = strategy.evaluation_padding(loader)  # a collective: before the forwards, which may be others
    model.eval()
    with torch.no_grad(), strategy.averaged_weights(model), data.workers_shut_down_after(loader):
        for inputs in data.iterate(loader):
            rows.append(_to_cpu(step(inputs)))
        for _ in range(padding):
            step(inputs)
    model.train(was_training)
    outputs = _concat(rows) if rows else None
    if order is not None and outputs is not None:
        order = order[: _rows(outputs)]  # drop_last: the loader left the short batch out
    gathered = [(order, outputs) for order, outputs in comm.all_gather((order, outputs), data_parallel=True)
                if outputs is not None]
    if not gathered:
        raise ValueError("predict: the loader gave no batch on any process")
    if any(order is None for order, _ in gathered):
        return _concat([outputs for _, outputs in gathered])
    size = max(max(order) for order, _ in gathered) + 1
    return _place(gathered, size)


def _place(gathered, size):
    """One output holding row ``order[i]`` = ``outputs[i]`` for every rank's ``(order, outputs)``."""
    first = gathered[0][1]
    if _per_sample(first):
        placed = [None] * size
        for order, outputs in gathered:
            for row, sample in zip(order, outputs):
                placed[row] = sample
        return placed
    if isinstance(first, torch.Tensor):
        placed = first.new_zeros((size, *first.shape[1:]))
        for order, outputs in gathered:
            placed[torch.as_tensor(order)] = outputs
        return placed
    if isinstance(first, dict):
        return {key: _place([(order, outputs[key]) for order, outputs in gathered], size) for key in first}
    return type(first)(_place([(order, outputs[i]) for order, outputs in gathered], size) for i in range(len(first)))


def _rows(outputs) -> int:
    if _per_sample(outputs):
        return len(outputs)
    while not isinstance(outputs, torch.Tensor):
        outputs = next(iter(outputs.values())) if isinstance(outputs, dict) else outputs[0]
    return outputs.shape[0]


def _concat(rows):
    first = rows[0]
    if _per_sample(first):
        return [sample for row in rows for sample in row]
    if isinstance(first, torch.Tensor):
        return torch.cat(rows)
    if isinstance(first, dict):
        return {key: _concat([row[key] for row in rows]) for key in first}
    return type(first)(_concat([row[i] for row in rows]) for i in range(len(first)))


def _per_sample(outputs) -> bool:
    """A list of dicts: one output per sample (a detector's predictions), not one tensor per output."""
    return isinstance(outputs, list) and bool(outputs) and isinstance(outputs[0], dict)


def _to_cpu(outputs):
    if isinstance(outputs, torch.Tensor):
        return outputs.detach().cpu()
    if isinstance(outputs, dict):
        return {key: _to_cpu(value) for key, value in outputs.items()}
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_to_cpu(value) for value in outputs)
    raise TypeError(f"predict_step returned {type(outputs).__name__}; return a tensor, or a tuple, list or dict "
                    f"of tensors")
