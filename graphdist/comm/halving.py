"""Topology-aware allreduce algorithms built from point-to-point steps (EFLOPS).

- :class:`HalvingDoubling` (``--allreduce hd``): reduce-scatter by recursive halving, then
  all-gather by recursive doubling, ``2 log2 P`` steps instead of the ring's ``2 (P-1)``, the
  same ``2 (P-1)/P * S`` bytes per rank. Ranks take butterfly positions from
  ``rankmap.hd_positions``: the big steps stay inside hosts, and on a topology declared
  BiGraph-wired (``GRAPHDIST_TOPOLOGY=8x1:bigraph``) every step across hosts pairs the two
  halves with one flow per inter-switch link (EFLOPS's rank mapping). A P that is not a power of
  two runs Rabenseifner's fallback (``rankmap.hd_sends``).
- :class:`Hierarchical` (``--allreduce hier``): each host's ranks send their tensor to the
  host's first rank (its leader), the leaders sum over the backend's allreduce, and each
  leader sends the sum back: ``2 (H-1)/H * S`` crosses each host's link, against ``1.5 S`` for
  a flat ring on 2 hosts x 2 workers.

Both run on their own thread and group (``graphdist.comm.p2p``), so the hook gets its handle at
once; both sum in the tensor's dtype, in another order than the backend (equal to float
tolerance); CUDA tensors go through host memory (the steps run over gloo: under NCCL,
``--allreduce auto`` keeps NCCL's own). Each counts its bytes by its own formula.

Example (one rank: nothing to send):
    >>> import torch
    >>> from graphdist.testing import one_rank_group
    >>> with one_rank_group():
    ...     hd = HalvingDoubling()
    ...     out = hd(torch.ones(3), None, "doc").wait()
    >>> out.tolist(), HalvingDoubling.formula(1000, rank=0, world_size=4, topology=None)
    ([1.0, 1.0, 1.0], (1500, 0))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

import graphdist.comm.p2p as p2p
from graphdist.comm.collectives import Group, Handle, new_group
from graphdist.comm.counters import COUNTER
from graphdist.comm.hostcopy import HostCopy
from graphdist.comm.group import get_rank, get_world_size, is_initialized
from graphdist.comm.rankmap import halving_distances, hd_positions, hd_shares
from graphdist.comm.topology import Topology


class _ThreadedAllreduce:
    """Shared by the algorithms below: their own group and thread, the hook-facing call, byte counts."""

    name = ""
    op_name = ""

    def __init__(self, topology: Optional[Topology] = None) -> None:
        self.world_size = get_world_size() if is_initialized() else 1
        self.rank = get_rank() if is_initialized() else 0
        fits = topology is not None and topology.world_size == self.world_size
        self.topology = topology if fits else Topology.single_host(self.world_size)
        self._group: Group = None
        self._thread: Optional[p2p.AlgorithmThread] = None
        if self.world_size > 1:
            self._group = new_group()  # collective: every rank builds the algorithm at the same point
            self._thread = p2p.AlgorithmThread(self.name)

    def bytes_sent(self, nbytes: int, rank: int, world_size: int) -> tuple[int, int]:
        return self.formula(nbytes, rank, world_size, self.topology if world_size == self.world_size else None)

    @staticmethod
    def formula(nbytes: int, rank: int, world_size: int, topology: Optional[Topology]) -> tuple[int, int]:
        raise NotImplementedError

    def __call__(self, tensor: torch.Tensor, group: Group = None, tag: str = "grad", op: str = "sum") -> Handle:
        if op != "sum":
            raise ValueError(f"Expected op 'sum' for the {self.name} allreduce (got {op!r}); use comm.all_reduce")
        if group is not None:
            raise ValueError(f"The {self.name} allreduce runs over all ranks on its own group (got group={group!r})")
        if self._thread is None:
            return Handle(self.op_name, None, None, result=tensor)
        sent, inter = self.bytes_sent(tensor.numel() * tensor.element_size(), self.rank, self.world_size)
        COUNTER.add(tag, sent, inter_host=inter)
        # The steps run over gloo on a flat host buffer: a CUDA tensor's copy starts here, on a side stream
        # (comm.hostcopy), and the algorithm's thread waits for it; a non-contiguous one is copied.
        host = HostCopy(tensor.detach())

        def run() -> torch.Tensor:
            staged = host.wait()
            staged = staged if staged.is_contiguous() else staged.contiguous()
            self._run(staged.view(-1))
            if staged.data_ptr() != tensor.data_ptr():
                tensor.copy_(staged)
            return tensor

        return Handle(self.op_name, self._thread.submit(run), self._group, result=tensor)

    def _run(self, flat: torch.Tensor) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.topology.describe()})"


class HalvingDoubling(_ThreadedAllreduce):
    """Recursive-halving reduce-scatter, then recursive-doubling all-gather, over host-aware positions.

    Args:
        topology: which ranks share a host, and whether the hosts are BiGraph-wired (default: one
            host, positions in rank order). Construction is collective (every rank, same point): it
            creates a group.
        positions: rank -> butterfly position (default: ``rankmap.hd_positions(topology)``).
    """

    name = "hd"
    op_name = "halving-doubling allreduce"

    def __init__(self, topology: Optional[Topology] = None, positions: Optional[Sequence[int]] = None) -> None:
        super().__init__(topology)
        self.positions = tuple(positions) if positions is not None else hd_positions(self.topology)
        self._rank_at = {p: r for r, p in enumerate(self.positions)}
        self._pieces: Any = None

    def bytes_sent(self, nbytes: int, rank: int, world_size: int) -> tuple[int, int]:
        if world_size != self.world_size:
            return self.formula(nbytes, rank, world_size, None)
        return self.formula(nbytes, rank, world_size, self.topology, self.positions)

    @staticmethod
    def formula(nbytes: int, rank: int, world_size: int, topology: Optional[Topology],
                positions: Optional[Sequence[int]] = None) -> tuple[int, int]:
        """``(bytes sent, of which across hosts)`` by rank ``rank`` (``rankmap.hd_sends``)."""
        if world_size <= 1:
            return 0, 0
        topo = topology if topology is not None else Topology.single_host(world_size)
        positions = tuple(positions) if positions is not None else hd_positions(topo)
        sent, crossing = hd_shares(positions, topo, rank)
        return int(sent * nbytes), int(crossing * nbytes)

    def _run(self, flat: torch.Tensor) -> None:
        size, me, group = self.world_size, self.positions[self.rank], self._group
        base = 1 << (size.bit_length() - 1)
        extra = size - base
        if me < 2 * extra and me % 2 == 0:  # hand off to the odd neighbour, get the sum back
            peer = self._rank_at[me + 1]
            p2p.send(flat, peer, group)
            p2p.recv(flat, peer, group)
            return
        if me < 2 * extra:
            scratch = torch.empty_like(flat)
            p2p.recv(scratch, self._rank_at[me - 1], group)
            flat.add_(scratch)
        virtual = me // 2 if me < 2 * extra else me - extra

        def rank_of(v: int) -> int:
            return self._rank_at[2 * v + 1 if v < extra else v + extra]

        # Pieces, each on its own thread and message tag: while one piece takes a step inside the
        # host, another takes its step across, so the inter-host link is not idle between steps;
        # no piece waits for another (a lock-step pipeline measured ~20% slower at 100 Mbit/s).
        pieces = [_butterfly_steps(piece, virtual, base, rank_of) for piece in
                  torch.tensor_split(flat, _pipeline_depth(flat.numel() * flat.element_size()))]
        if len(pieces) == 1:
            _run_steps(pieces[0], 0, group)
        else:
            running = [self._pool().submit(_run_steps, steps, tag, group) for tag, steps in enumerate(pieces)]
            for piece in running:
                piece.result()
        self._hand_back(me, extra, flat)

    def _hand_back(self, me: int, extra: int, flat: torch.Tensor) -> None:
        if me < 2 * extra:
            p2p.send(flat, self._rank_at[me - 1], group=self._group)

    def _pool(self) -> Any:
        if self._pieces is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pieces = ThreadPoolExecutor(MAX_PIECES, thread_name_prefix="graphdist-hd-piece")
        return self._pieces


PIECE_BYTES = 2 << 20  # measured on the emulated cluster (bench_comm.py): 2-4 MB pieces keep the link busy
MAX_PIECES = 16


@dataclass
class _Step:
    """One butterfly step of one piece: send ``send`` to ``peer``, receive ``recv``, then add it into ``add_into``."""

    peer: int
    send: torch.Tensor
    recv: torch.Tensor
    add_into: Optional[torch.Tensor] = None


def _pipeline_depth(nbytes: int) -> int:
    """Pieces of about ``PIECE_BYTES`` each, at most 16 (one piece below: latency-bound, more steps add latency)."""
    return max(1, min(MAX_PIECES, nbytes // PIECE_BYTES))


def _butterfly_steps(flat: torch.Tensor, virtual: int, base: int, rank_of: Any) -> list[_Step]:
    """Recursive halving (keep one half, send the other, add the partner's copy), then recursive
    doubling (swap the reduced segments) over ``base`` chunks of ``flat``, as views of it."""
    bounds = [i * flat.numel() // base for i in range(base + 1)]

    def view(lo: int, hi: int) -> torch.Tensor:
        return flat[bounds[lo] : bounds[hi]]

    steps, (lo, hi) = [], (0, base)
    distances = halving_distances(base)
    for d in distances:
        mid = (lo + hi) // 2
        keep, give = ((lo, mid), (mid, hi)) if virtual & d == 0 else ((mid, hi), (lo, mid))
        mine = view(*keep)
        steps.append(_Step(rank_of(virtual ^ d), view(*give), torch.empty_like(mine), mine))
        lo, hi = keep
    for d in reversed(distances):
        width = hi - lo
        other = (hi, hi + width) if virtual & d == 0 else (lo - width, lo)
        steps.append(_Step(rank_of(virtual ^ d), view(lo, hi), view(*other)))
        lo, hi = min(lo, other[0]), max(hi, other[1])
    return steps


def _run_steps(steps: list[_Step], tag: int, group: Group) -> None:
    for step in steps:
        p2p.exchange_many([(step.send, step.recv, step.peer, tag)], group)
        if step.add_into is not None:
            step.add_into.add_(step.recv)


class Hierarchical(_ThreadedAllreduce):
    """Reduce inside each host to its leader, allreduce among leaders, send the sum back.

    Args:
        topology: which ranks share a host (default: one host, rank 0 leads).
            Construction is collective (every rank, same point): it creates groups.
    """

    name = "hier"
    op_name = "hierarchical allreduce"

    def __init__(self, topology: Optional[Topology] = None) -> None:
        super().__init__(topology)
        self._host = self.topology.hosts[self.topology.host_of(self.rank)]
        leaders = [h[0] for h in self.topology.hosts]
        self._leaders: Group = None
        if self.world_size > 1 and len(leaders) > 1:
            self._leaders = new_group(ranks=leaders)  # every rank calls it, as torch requires

    @staticmethod
    def formula(nbytes: int, rank: int, world_size: int, topology: Optional[Topology]) -> tuple[int, int]:
        """``(bytes sent, of which across hosts)``: a member sends S to its leader; a leader sends
        the leaders' ring share across and S back to each member."""
        if world_size <= 1:
            return 0, 0
        topo = topology if topology is not None else Topology.single_host(world_size)
        host = topo.hosts[topo.host_of(rank)]
        if rank != host[0]:
            return nbytes, 0
        hosts = topo.num_hosts
        inter = int(2 * (hosts - 1) / hosts * nbytes)
        return inter + (len(host) - 1) * nbytes, inter

    def _run(self, flat: torch.Tensor) -> None:
        leader, group = self._host[0], self._group
        # Pieces pipelined: the leaders' allreduce of one piece runs while the next is still being
        # summed inside the host, and each summed piece goes back while later ones cross.
        pieces = torch.tensor_split(flat, _pipeline_depth(flat.numel() * flat.element_size()))
        if self.rank != leader:
            for piece in pieces:
                p2p.send(piece, leader, group)
            for piece in pieces:
                p2p.recv(piece, leader, group)
            return
        scratch = torch.empty_like(pieces[0])
        crossing = []
        for piece in pieces:
            for member in self._host[1:]:
                into = scratch[: piece.numel()]
                p2p.recv(into, member, group)
                piece.add_(into)
            if self._leaders is not None:
                crossing.append(p2p.start_all_reduce_now(piece, self._leaders))
        for k, piece in enumerate(pieces):
            if crossing:
                crossing[k].wait()
            for member in self._host[1:]:
                p2p.send(piece, member, group)


__all__ = ["HalvingDoubling", "Hierarchical"]
