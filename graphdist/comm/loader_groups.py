"""Process groups for loader processes: loader k of every worker forms a sampling group of its own.

A worker whose batches are sampled across parts runs K loader processes (``--loaders K``,
``sampling/loader_procs.py``). Their sampling and feature fetches are collectives, and each
loader issues them for its own batches (batch b to loader b mod K on every worker), so loader
k of every worker must be in one group, apart from loader j's and from the workers' own. A
loader process is spawned (a fork would inherit the worker's group, which it cannot use), so it
joins a default group of its own: the workers agree on a store at set-up (:func:`loader_rendezvous`,
collective: rank 0 serves a ``TCPStore`` at its address, which every worker learns), and loader
``k`` of worker ``r`` joins rank ``r`` of the group under the store prefix of ``k``
(:func:`join_loader_group`).

Example (no job: nothing to agree on):
    >>> loader_rendezvous() is None
    True
"""

from __future__ import annotations

import datetime
import itertools
from dataclasses import dataclass
from typing import Any, Optional

import torch.distributed as dist

from graphdist.comm.collectives import broadcast_object
from graphdist.comm.group import CommError, get_rank, get_world_size, group_timeout_s, is_initialized, local_address

__all__ = ["LoaderGroups", "join_loader_group", "loader_rendezvous"]

_SERVERS: list[Any] = []  # rank 0's stores, alive as long as the worker
_ROUNDS = itertools.count()


@dataclass(frozen=True)
class LoaderGroups:
    """Where loader processes meet: the store's address and port, this set-up's prefix, the job's size."""

    address: str
    port: int
    prefix: str
    world_size: int
    timeout_s: float


def loader_rendezvous(timeout_s: Optional[float] = None) -> Optional[LoaderGroups]:
    """The meeting point of this job's loader processes (collective: every worker, the same point); None alone.

    Rank 0 starts a ``TCPStore`` on a free port at its address as peers see it (``GLOO_SOCKET_IFNAME``'s, or
    its hostname's) and tells the others. Each call gives a new prefix, so two loaders' groups never meet.
    """
    if not is_initialized() or get_world_size() == 1:
        return None
    timeout_s = float(timeout_s if timeout_s is not None else group_timeout_s() or 180.0)
    spec = None
    if get_rank() == 0:
        server = dist.TCPStore(local_address(), 0, None, True, datetime.timedelta(seconds=timeout_s),
                               wait_for_workers=False)
        _SERVERS.append(server)
        spec = LoaderGroups(local_address(), int(server.port), f"graphdist-loaders/{next(_ROUNDS)}",
                            get_world_size(), timeout_s)
    return broadcast_object(spec)


def join_loader_group(groups: LoaderGroups, loader: int, rank: int) -> None:
    """Makes this loader process rank ``rank`` of loader ``loader``'s group (its default group)."""
    timeout = datetime.timedelta(seconds=groups.timeout_s)
    try:
        client = dist.TCPStore(groups.address, groups.port, None, False, timeout)
        store = dist.PrefixStore(f"{groups.prefix}/loader-{loader}", client)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=groups.world_size, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - one clear error, naming who could not join where
        raise CommError(f"[rank {rank}] loader {loader} could not join its sampling group at {groups.address}:"
                        f"{groups.port} (rank 0 serves it) within {groups.timeout_s:.0f}s: {exc}") from exc
