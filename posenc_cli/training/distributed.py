"""Scale-out: data-parallel training under torchrun, and torch threads for parallel sweep jobs.

`torchrun --nproc_per_node=N -m posenc_cli train ...` starts N copies of the CLI. They agree on one
run directory before Hydra starts, each trains on its own slice of every batch, DDP averages the
gradients, and only rank 0 writes files or draws progress.

Global batch: train.batch_size is the batch of the whole job; each of the N ranks takes
batch_size / N of its rows. Every rank draws the same global batch from the same seeded generator
and keeps its own slice, so N processes follow the single-process run step for step (up to the
order of float sums), and a checkpoint resumes at any N.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from posenc_cli.core.cores import usable_cores
from posenc_cli.core.errors import UsageError

T = TypeVar("T")


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def under_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def current() -> Context:
    if not (dist.is_available() and dist.is_initialized()):
        return Context()
    return Context(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


@contextmanager
def process_group(*, sweep: bool) -> Iterator[None]:
    """Under torchrun: join the group for the duration (a sweep is refused there). Elsewhere: nothing."""
    if not under_torchrun():
        yield
        return
    if sweep:
        raise UsageError("-m (a sweep) cannot run under torchrun; start one torchrun per run instead")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    try:
        yield
        dist.barrier()  # nobody tears the group down while another rank still needs it
    finally:
        dist.destroy_process_group()


def launched_rank() -> int | None:
    """This process's rank as torchrun started it; None when not under torchrun."""
    return int(os.environ.get("RANK", "0")) if under_torchrun() else None


def rank_overrides(rank: int | None) -> list[str]:
    """The Hydra overrides of a rank > 0 under torchrun (no .hydra/, no train.log, warnings and errors
    only), composed into its job from the start; none elsewhere."""
    if not rank:
        return []
    return [
        "hydra.output_subdir=null",
        f"hydra.job_logging.handlers.file.filename={os.devnull}",
        "hydra.job_logging.root.level=WARNING",
        "hydra/hydra_logging=disabled",
    ]


def decided_by_rank_zero(decide: Callable[[], T]) -> T:
    """`decide()` made once, by rank 0, and its answer given to every rank: rank 0 claims (and locks) the
    run directory for all (Hydra's ${now:...} may differ by a second between ranks)."""
    if not (dist.is_available() and dist.is_initialized()):
        return decide()
    box = [decide() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def device_for(device: torch.device, ctx: Context) -> torch.device:
    """One GPU per rank; CPU ranks share the CPU."""
    return torch.device("cuda", ctx.local_rank) if device.type == "cuda" and ctx.enabled else device


def check_batch(batch_size: int, ctx: Context) -> None:
    if batch_size % ctx.world_size:
        raise UsageError(
            f"train.batch_size={batch_size} is the global batch and must divide evenly over "
            f"{ctx.world_size} processes; use a multiple of {ctx.world_size}"
        )


def wrap(model: nn.Module, device: torch.device, ctx: Context) -> nn.Module:
    """DDP for training steps; everything else (validation, checkpoints) uses the bare model."""
    if not ctx.enabled:
        return model
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def shard(batch: torch.Tensor, ctx: Context) -> torch.Tensor:
    """This rank's rows of the global batch."""
    return batch.chunk(ctx.world_size)[ctx.rank] if ctx.enabled else batch


def mean(values: torch.Tensor, ctx: Context) -> torch.Tensor:
    """The average over ranks (the global-batch value, as shards are equal)."""
    if not ctx.enabled:
        return values
    values = values.clone()
    dist.all_reduce(values)
    return values / ctx.world_size


def any_rank(flag: bool, device: torch.device, ctx: Context) -> bool:
    """True on every rank if it is true on one, so all ranks stop at the same step."""
    if not ctx.enabled:
        return flag
    value = torch.tensor([float(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def threads_per_job(launcher: Mapping[str, Any]) -> int | None:
    """Torch threads for one job when several share this machine, so they split its cores instead of
    each starting one thread per core. None: nothing runs beside this job; keep torch's default."""
    if launcher.get("cpus_per_task"):  # submitit: the cores the scheduler gave this job
        return int(launcher["cpus_per_task"])
    cores = usable_cores()
    n_jobs = launcher.get("n_jobs")  # joblib: -1 means one job per core, -2 all cores but one, ...
    side_by_side = (
        (cores + 1 + n_jobs if n_jobs < 0 else n_jobs)
        if n_jobs
        else int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    )
    return max(1, cores // max(1, side_by_side)) if side_by_side > 1 else None
