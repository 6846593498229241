"""What each worker runs on: its device, the ``--cluster`` spec, and whether the workers differ.

Read by the loop (``trainers/run.py``) and by the strategies (``minibatch``, ``fullgraph``,
``aggregation``) alike; kept apart from both so that neither imports the other.

Example:
    >>> from graphdist.config import TrainConfig
    >>> resolve_device("cpu"), heterogeneous(TrainConfig(devices=("cpu", "cpu")))
    (device(type='cpu'), False)
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from graphdist.config import TrainConfig


def resolve_device(spec: str) -> torch.device:
    """``cpu`` or ``cuda[:i]``, checked: a CUDA device on a CPU-only build is a clear error.

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
    """
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"--devices asks for {spec} but this torch build / machine has no CUDA device")
        return torch.device(spec)
    return torch.device("cpu")


@functools.lru_cache(maxsize=4)
def cluster_spec(path: str) -> Any:
    """``--cluster``'s spec, read and validated once per process (the launcher, then each worker)."""
    from placement.cluster import load_cluster

    return load_cluster(path)


def heterogeneous(cfg: TrainConfig) -> bool:
    """Whether the workers differ (device; or threads or speed in ``--cluster``): ``--placement auto`` profiles them."""
    if len(set(cfg.devices)) > 1:
        return True
    if not cfg.cluster:
        return False
    return len({(w.device, w.threads, w.speed) for w in cluster_spec(cfg.cluster).workers}) > 1


__all__ = ["cluster_spec", "heterogeneous", "resolve_device"]
