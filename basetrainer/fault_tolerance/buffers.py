"""The model's buffers across the replica groups: BatchNorm's running statistics and batch counts, and whatever buffers
a user's module keeps.

torchft averages the gradients, so the groups' parameters stay equal; buffers are not trained, and each group would
update them from its own batches. So at every commit (a step, or under DiLoCo a sync) the buffers of the first group
alive (place 0 in the quorum) go to every group, bit for bit, as DDP's ``broadcast_buffers`` sends rank 0's to the
other processes inside a group. The first group's, not the groups' average, because:

- it is what DDP does: a job of N groups keeps the statistics DDP over the same processes keeps, one process's running
  estimates (each already an average over many steps), rather than a new estimator of its own;
- it copies every buffer exactly, whatever its dtype: ``num_batches_tracked`` (an integer), an integer or boolean
  buffer of a user's module. An average applies to floating-point buffers only, and rounds;
- it is one all-reduce of the buffers' bytes, in which every other group sends zeros, sent before the gradients'.

A unit the groups do not commit (a group failed during it) puts the buffers back as they were at its quorum, as its
optimizer steps are not taken: its batches are read again, and their statistics are not counted twice. A restarted
group receives the buffers with the rest of the training state when it heals (they are in the model's state_dict).
Inside a group of several processes the same rank of every group exchanges its buffers, and DDP then sends rank 0's
to the group's other ranks at the next forward.
"""
import torch
from torch.distributed import ReduceOp


class GroupBuffers:
    """The buffers of ``model`` (floating or not), kept alike across the groups by :meth:`send` and :meth:`take`."""

    def __init__(self, model: torch.nn.Module):
        self.buffers = [buffer for buffer in model.buffers()]
        self._at_quorum = []

    def remember(self) -> None:
        """At a unit's quorum (after a heal there): the buffers to put back if the unit is dropped."""
        self._at_quorum = [buffer.detach().clone() for buffer in self.buffers]

    def send(self, manager, first: bool):
        """Starts the all-reduce that brings every group the first group's buffers (``first``: this group is it);
        returns ``(its bytes, torchft's work)``, to wait for before the commit and hand to :meth:`take`, or None
        without buffers."""
        if not self.buffers:
            return None
        sent = torch.cat([buffer.detach().reshape(-1).view(torch.uint8) for buffer in self.buffers])
        if not first:
            sent.zero_()  # a sum with zeros: the first group's bytes, exactly
        return sent, manager.allreduce(sent, reduce_op=ReduceOp.SUM)

    def take(self, sending, committed: bool) -> None:
        """Once the unit's commit is decided: the first group's buffers (``sending``, from :meth:`send`), or, had the
        groups not committed it, the buffers as they were at its quorum."""
        if not committed:
            with torch.no_grad():
                for buffer, kept in zip(self.buffers, self._at_quorum):
                    buffer.copy_(kept)
            return
        if sending is None:
            return
        received, offset = sending[0], 0
        with torch.no_grad():
            for buffer in self.buffers:
                size = buffer.numel() * buffer.element_size()
                chunk = received[offset:offset + size].clone()  # aligned for the view as the buffer's dtype
                buffer.copy_(chunk.view(buffer.dtype).reshape(buffer.shape))
                offset += size
