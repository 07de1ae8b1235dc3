"""The device mesh: how the processes are arranged for hybrid parallelism, from ``parallel.mesh`` in the config.

Four named dimensions, outermost first (torchtitan's names and order)::

    pp             pipeline parallel: the model's layers split into stages, one group of processes
                   per stage
    dp_replicate   whole copies of the (sharded) model, gradients all-reduced between them (HSDP's
                   outer dim)
    dp_shard       FSDP: parameters, gradients and optimizer state sharded over these processes
    tp             tensor parallel: each layer's matrices split over these processes

The product of the sizes is the number of processes; one size may be -1, inferred from the
others when the processes run (the process that launches them reads the config too, alone).
Process ``r`` sits at ``(r // (dp_replicate * dp_shard * tp), r // (dp_shard * tp) % dp_replicate,
r // tp % dp_shard, r % tp)``: the processes of one tensor-parallel group are neighbours (on one
machine when the launch puts consecutive ranks there, where the traffic of tensor parallelism
belongs), and the stages of a pipeline lie furthest apart (its traffic is the smallest).

The data-parallel dimensions are ``dp_replicate`` and ``dp_shard`` together: processes that
differ there see different batches; processes of one tensor-parallel group, and the stages of
one pipeline, see the same ones. :func:`data_parallel_coordinates` computes this process's data-parallel rank from the
config alone, so the data loaders (built before the model) shard by it.
"""
import math
from dataclasses import dataclass
from typing import Optional

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from ..distributed import comm
from ..errors import ConfigError

DIMENSIONS = ("pp", "dp_replicate", "dp_shard", "tp")


@dataclass(frozen=True)
class MeshShape:
    """The sizes of the mesh's dimensions (see the module docstring): each at least 1, or -1 (at most one) until
    :meth:`resolve` infers it from the number of processes."""

    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    pp: int = 1

    @classmethod
    def requested(cls, sizes: dict) -> "MeshShape":
        """The shape the config's ``parallel.mesh`` asks for, its form checked (the number of processes is known
        only once they run: :meth:`resolve`)."""
        sizes = {name: sizes.get(name, 1) for name in DIMENSIONS}
        zero = [name for name, size in sizes.items() if size < 1 and size != -1]
        if zero:
            raise ConfigError(f"parallel.mesh: {zero[0]} is {sizes[zero[0]]}; a size is at least 1, or -1 to infer it")
        inferred = [name for name, size in sizes.items() if size == -1]
        if len(inferred) > 1:
            raise ConfigError(f"parallel.mesh: {' and '.join(inferred)} are both -1; at most one size is inferred "
                              f"from the number of processes")
        return cls(**sizes)

    @classmethod
    def from_sizes(cls, sizes: dict, world_size: int) -> "MeshShape":
        """:meth:`requested`, then :meth:`resolve` on ``world_size`` processes."""
        return cls.requested(sizes).resolve(world_size)

    def resolve(self, world_size: int) -> "MeshShape":
        """This shape on ``world_size`` processes, its -1 inferred; a product that is not the number of processes
        is a ConfigError naming both."""
        sizes = {name: getattr(self, name) for name in DIMENSIONS}
        inferred = [name for name, size in sizes.items() if size == -1]
        known = math.prod(size for size in sizes.values() if size != -1)
        if inferred:
            if world_size % known:
                raise ConfigError(f"parallel.mesh: {world_size} processes do not divide into the other sizes' "
                                  f"product {known}, so {inferred[0]} cannot be inferred: start a multiple of "
                                  f"{known} processes, or change the sizes")
            sizes[inferred[0]] = world_size // known
        shape = type(self)(**sizes)
        if shape.size != world_size:
            raise ConfigError(f"parallel.mesh is {shape.describe()} = {shape.size} processes and this run has "
                              f"{world_size}: start {shape.size} processes, or set one size to -1 to infer it")
        return shape

    @property
    def size(self) -> int:
        return self.pp * self.dp_replicate * self.dp_shard * self.tp

    @property
    def per_stage(self) -> int:
        """Processes in each pipeline stage (all of them without a pipeline)."""
        return self.size // self.pp

    @property
    def data_parallel_size(self) -> int:
        """Processes that see different batches."""
        return self.dp_replicate * self.dp_shard

    def describe(self) -> str:
        return " x ".join(f"{name} {getattr(self, name)}" for name in DIMENSIONS if name != "pp" or self.pp > 1)


def data_parallel_coordinates(shape: MeshShape, rank: int) -> tuple:
    """``(data-parallel rank, tensor-parallel rank)`` of global ``rank`` on ``shape``."""
    return rank % shape.per_stage // shape.tp, rank % shape.tp


def pipeline_rank(shape: MeshShape, rank: int) -> int:
    """The pipeline coordinate (which stage group) of global ``rank`` on ``shape``."""
    return rank // shape.per_stage


@dataclass
class Mesh:
    """The built mesh of this run: ``device_mesh`` (all three dimensions, named) and the sub-meshes the strategy
    applies parallelism over."""

    shape: MeshShape
    device_mesh: Optional[DeviceMesh]

    @property
    def tp(self) -> DeviceMesh:
        return self.device_mesh["tp"]

    @property
    def pp(self) -> DeviceMesh:
        return self.device_mesh["pp"]

    @property
    def data_parallel(self) -> DeviceMesh:
        """The 2-D ``(dp_replicate, dp_shard)`` mesh FSDP shards over (HSDP when ``dp_replicate`` > 1)."""
        return self.device_mesh["dp_replicate", "dp_shard"]


def build_mesh(shape: Optional[MeshShape], device) -> Optional[Mesh]:
    """Builds the named ``DeviceMesh`` of ``shape`` (resolved on this run's processes: a ConfigError when they do
    not fit it) on ``device``'s type (every process calls it, in the same order)
    and records the data-parallel group for the loaders and the metric sums
    (:func:`~basetrainer.distributed.comm.set_data_parallel`). No shape: no mesh, every process its own
    data-parallel rank."""
    comm.set_data_parallel(None, None, None)
    if shape is None:
        return None
    shape = shape.resolve(comm.get_world_size())
    if not comm.is_distributed():
        return Mesh(shape, None)
    device_mesh = init_device_mesh(device.type, tuple(getattr(shape, name) for name in DIMENSIONS),
                                   mesh_dim_names=DIMENSIONS)
    per_stage = shape.per_stage
    groups = [list(range(stage * per_stage + tp_rank, (stage + 1) * per_stage, shape.tp))
              for stage in range(shape.pp) for tp_rank in range(shape.tp)]
    group, _ = dist.new_subgroups_by_enumeration(groups)  # collective: every process, every group
    data_rank, _ = data_parallel_coordinates(shape, comm.get_rank())
    comm.set_data_parallel(data_rank, shape.data_parallel_size, group)
    return Mesh(shape, device_mesh)
