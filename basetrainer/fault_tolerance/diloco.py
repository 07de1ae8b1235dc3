"""DiLoCo and streaming DiLoCo across replica groups (``local_sgd: {mode: diloco}``).

Each group takes ``period`` optimizer steps of its own (the inner steps, with the run's optimizer), then the groups
average their change since the last outer step (the pseudo-gradient: outer weights minus own weights) and take
one outer step on it with SGD and Nesterov momentum (Douillard et al., "DiLoCo: Distributed Low-Communication
Training of Language Models", 2023). Streaming DiLoCo (Douillard et al., 2025) splits the model's parameters into
``fragments`` parts, in order, and syncs one every ``period / fragments`` steps, in turn, so that each sync sends
a fraction of the model; a fragment's average is sent ``fragment_sync_delay`` steps before it is applied, so that
those steps' computation hides its transfer (the fragment's steps meanwhile are then replaced by the outer step).
The model's buffers (BatchNorm's statistics) travel with every sync: the first group's are sent with the fragment
and every group takes them when the sync commits (:mod:`basetrainer.fault_tolerance.buffers`); between syncs each
group's follow its own batches, as its own weights do.

Each sync is one commit unit of the replica groups (:mod:`basetrainer.fault_tolerance.replica_groups`): its quorum comes before the unit's
first batch, and when a group fails during the unit the sync does not commit: the fragment goes back to its outer
weights on every group, the buffers go back to theirs at the unit's quorum, and the unit's samples are read again.
The outer weights, with the buffers of the last sync, are what every group holds alike: evaluation, checkpoints'
model and exported weights use them (:meth:`DiLoCo.outer_weights`); a checkpoint also holds this group's own weights
and buffers and the outer optimizers' momentum, so a resume continues exactly.
"""
import contextlib

import torch

from ..utils.log import get_logger

logger = get_logger()


class DiLoCo:
    """DiLoCo over ``model``'s trainable parameters, for ``groups`` (a :class:`~.replica_groups.ReplicaGroups`);
    ``options`` is a :class:`~.options.DiLoCoOptions`."""

    def __init__(self, options, groups, model: torch.nn.Module):
        self.options, self.groups = options, groups
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.fragments = split_in_fragments(self.parameters, options.fragments)
        self.outer = [[p.detach().clone() for p in fragment] for fragment in self.fragments]
        self.buffers = groups.buffers.buffers  # the model's, which every sync makes alike across the groups
        self.outer_buffers = [b.detach().clone() for b in self.buffers]  # as the last sync left them
        self.outer_optimizers = [torch.optim.SGD(fragment, lr=options.outer_lr, momentum=options.outer_momentum,
                                                 nesterov=options.outer_nesterov and options.outer_momentum > 0)
                                 for fragment in self.fragments]
        # between send and apply: (fragment, its flat averaged change, torchft's work, the buffers being sent)
        self._sent = None

    def after_step(self) -> None:
        """After each inner optimizer step: sends the current fragment's change ``fragment_sync_delay`` steps before
        the unit's end, and at its end applies the outer step (or, if the groups did not commit, discards it)."""
        steps, per_sync = self.groups.steps_pending, self.options.steps_per_sync
        if steps == per_sync - self.options.fragment_sync_delay:
            self._send(self.groups.manager.current_step() % len(self.fragments))
        if steps == per_sync:
            self._apply()

    def _send(self, index: int) -> None:
        changes = [outer - own.detach() for outer, own in zip(self.outer[index], self.fragments[index])]
        flat = torch._utils._flatten_dense_tensors(changes)
        self._sent = (index, flat, self.groups.allreduce(flat), self.groups.send_buffers())

    def _apply(self) -> None:
        index, flat, work, buffers = self._sent
        self._sent = None
        work.wait()
        fragment, outer = self.fragments[index], self.outer[index]
        committed = self.groups.commit(buffers)  # the first group's buffers taken, or put back as at the quorum
        with torch.no_grad():
            for parameter, weights in zip(fragment, outer):
                parameter.copy_(weights)
        if not committed:
            return  # back to the outer weights; the unit's samples are read again
        averaged = torch._utils._unflatten_dense_tensors(flat, list(outer))
        for parameter, change in zip(fragment, averaged):
            parameter.grad = change
        self.outer_optimizers[index].step()
        for parameter, weights in zip(fragment, outer):
            parameter.grad = None
            weights.copy_(parameter.detach())
        _copy(self.buffers, self.outer_buffers)

    @contextlib.contextmanager
    def outer_weights(self):
        """A context in which the model holds the outer weights and the last sync's buffers, every group's alike (it
        yields True)."""
        own, own_buffers = [p.detach().clone() for p in self.parameters], [b.detach().clone() for b in self.buffers]
        with torch.no_grad():
            for fragment, outer in zip(self.fragments, self.outer):
                for parameter, weights in zip(fragment, outer):
                    parameter.copy_(weights)
        _copy(self.outer_buffers, self.buffers)
        try:
            yield True
        finally:
            _copy(own, self.parameters)
            _copy(own_buffers, self.buffers)

    # ------------------------------------------------------------------ checkpoint part
    def state_dict(self) -> dict:
        """The outer weights and momentum, the last sync's buffers, this group's own weights and buffers, and a
        fragment's average and the first group's buffers sent and not yet applied (waited for here: a checkpoint
        between the send and the outer step resumes with them)."""
        sent = None
        if self._sent is not None:
            index, flat, work, buffers = self._sent
            work.wait()
            if buffers is not None:
                buffers[1].wait()
            sent = [index, flat.cpu().clone(), None if buffers is None else buffers[0].cpu().clone()]
        return {"diloco": {"fragments": len(self.fragments),
                           "outer": [[w.cpu().clone() for w in outer] for outer in self.outer],
                           "own": [p.detach().cpu().clone() for p in self.parameters],
                           "outer_buffers": [b.cpu().clone() for b in self.outer_buffers],
                           "own_buffers": [b.detach().cpu().clone() for b in self.buffers],
                           "outer_optimizers": [optimizer.state_dict() for optimizer in self.outer_optimizers],
                           "sent": sent}}

    def load_state_dict(self, saved: dict, name: str) -> None:
        part = saved.get("diloco")
        _copy(self.buffers, self.outer_buffers)  # the model's, as loaded: the last sync's, where saved under DiLoCo
        if part is None:
            return  # a checkpoint without DiLoCo: the outer weights are the model's, as loaded
        if part["fragments"] != len(self.fragments):
            logger.warning("%s synced the model in %d fragment(s) and this run in %d: the outer weights start from "
                           "the checkpoint's model and the outer momentum afresh", name, part["fragments"],
                           len(self.fragments))
            self._reset_outer()
            return
        with torch.no_grad():
            for outer, saved_outer in zip(self.outer, part["outer"]):
                for weights, value in zip(outer, saved_outer):
                    weights.copy_(value)
            for parameter, value in zip(self.parameters, part["own"]):
                parameter.copy_(value)
        if "own_buffers" in part:  # saved since the buffers travel with the syncs
            _copy(part["outer_buffers"], self.outer_buffers)
            _copy(part["own_buffers"], self.buffers)
        for optimizer, state in zip(self.outer_optimizers, part["outer_optimizers"]):
            optimizer.load_state_dict(state)
        sent = part.get("sent")
        if sent is not None:
            device = self.parameters[0].device
            buffers = None if len(sent) < 3 or sent[2] is None else (sent[2].to(device), _Received())
            sent = (sent[0], sent[1].to(device), _Received(), buffers)
        self._sent = sent

    def _reset_outer(self) -> None:
        with torch.no_grad():
            for fragment, outer in zip(self.fragments, self.outer):
                for parameter, weights in zip(fragment, outer):
                    weights.copy_(parameter.detach())


def _copy(sources, targets) -> None:
    with torch.no_grad():
        for target, source in zip(targets, sources):
            target.copy_(source)


class _Received:
    """A fragment's average already received (restored from a checkpoint): nothing to wait for."""

    def wait(self) -> bool:
        return True


def split_in_fragments(parameters: list, count: int) -> list:
    """``parameters`` in order, cut into ``count`` runs of about the same number of elements (none empty)."""
    count = min(count, len(parameters))
    total = sum(p.numel() for p in parameters)
    fragments, current, filled = [], [], 0
    for index, parameter in enumerate(parameters):
        current.append(parameter)
        filled += parameter.numel()
        left_to_cut = count - len(fragments) - 1
        if left_to_cut and (filled >= total * (len(fragments) + 1) / count
                            or len(parameters) - index - 1 == left_to_cut):
            fragments.append(current)
            current = []
    fragments.append(current)
    return fragments
