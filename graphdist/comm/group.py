"""Process-group set-up, teardown and role helpers."""

from __future__ import annotations

import datetime
import logging
import os
from typing import Optional

import torch.distributed as dist

logger = logging.getLogger(__name__)

# Under NCCL the default group only takes CUDA tensors; counts, metadata and the
# sampler's CPU traffic go through this gloo group over the same ranks instead.
_CPU_GROUP: Optional[object] = None


class CommError(RuntimeError):
    """A collective failed or timed out; the message names the rank and the operation."""


def init_process_group(
    rank: int,
    world_size: int,
    init_method: Optional[str] = None,
    backend: str = "gloo",
    timeout_s: float = 120.0,
) -> None:
    """Joins (or creates) the default process group.

    Args:
        rank: this process's rank in ``[0, world_size)``.
        world_size: number of processes.
        init_method: ``file://...`` or ``tcp://host:port``; default ``env://``
            (``MASTER_ADDR``/``MASTER_PORT``, as torchrun sets them).
        backend: ``gloo`` (CPU, or mixed CPU/GPU) or ``nccl`` (every rank has a GPU).
        timeout_s: every collective of this group fails after this many seconds
            instead of hanging.

    Raises:
        ValueError: on a rank outside ``[0, world_size)`` or an unknown backend.
        CommError: if the rendezvous does not complete within ``timeout_s``.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank must lie in [0, world_size) (got rank={rank}, world_size={world_size})")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl' (got {backend!r})")
    if dist.is_initialized():
        return
    try:
        dist.init_process_group(
            backend=backend,
            init_method=init_method or "env://",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    except Exception as exc:  # noqa: BLE001 - turn any rendezvous failure into one clear error
        raise CommError(
            f"[rank {rank}] could not join the process group of {world_size} via {init_method or 'env://'} "
            f"within {timeout_s:.0f}s: {exc}"
        ) from exc
    global _CPU_GROUP
    if backend == "nccl":
        _CPU_GROUP = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))


def cpu_group() -> Optional[object]:
    """The gloo group for CPU tensors when the default group is NCCL (None: the default group works)."""
    return _CPU_GROUP


def shutdown() -> None:
    """Leaves the process group if one is set up."""
    global _CPU_GROUP
    _CPU_GROUP = None
    if dist.is_initialized():
        dist.destroy_process_group()


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank (0 without a process group)."""
    if is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", 0))


def get_world_size() -> int:
    """The number of processes (1 without a process group)."""
    if is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", 1))


def is_main_process() -> bool:
    return get_rank() == 0


def barrier() -> None:
    """Waits for every rank; a no-op without a process group."""
    if is_initialized():
        try:
            dist.barrier()
        except Exception as exc:  # noqa: BLE001
            raise CommError(f"[rank {get_rank()}] barrier failed: {exc}") from exc
