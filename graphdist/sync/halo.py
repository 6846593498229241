"""Halo embedding exchange for full-graph partition-parallel training (PipeGCN / DistGNN style).

Each worker holds its part's inner nodes and their 1-hop halo. Before a layer runs, every
worker needs the previous layer's embeddings of its halo nodes; their owners have them. The
exchange plan is set up once (one all-to-all of the halo ids each worker needs): afterwards
each layer sends, to each peer, exactly the boundary rows that peer needs (``send_index``) and
receives its own halo rows, in one ``all_to_all_v`` on the halo group. Backward mirrors it:
the gradients of the received halo rows go back to their owners, which add them to the rows
they sent (``index_add``). An autograd function does both, so any model with
``layer_forward(i, x, block)`` trains through it.

Staleness (``staleness=1``, pipelined, PipeGCN): a layer uses the halo embeddings received
during the previous iteration, and the halo gradients that came back then, while this
iteration's exchange travels in the background; the first iteration is exact, to fill the
buffers. ``smoothing`` g mixes each newly received buffer into the last one,
``h <- g * h_old + (1 - g) * h_new``, for embeddings and gradients alike.

Boundary-node sampling (``boundary_sample`` p < 1, BNS-GCN, exact exchange only): each epoch
keeps each boundary node with probability p, drawn from a generator seeded by the epoch and the
seed over all global ids, so its owner and every reader agree without a message; the owner sends only kept rows
and readers drop the edges from the others (``kept_halo``). p = 1 is the exact exchange.

Every rank must run the same layers in the same order (all exchanges are collectives on the
halo group). Bytes are counted under the tag ``halo``: per layer, boundary rows x width x 4, or
x 2 with a 16-bit ``wire_dtype`` (``--compress fp16|bf16``: the layers' embeddings and their
gradients travel rounded to 16 bits and are added back in float32; ``fetch``'s rows stay exact).

Example (one worker: nothing to exchange, the halo is empty):
    >>> import tempfile, torch
    >>> from graphdist.testing import one_rank_group, tiny_graph
    >>> from partition.api import load_partition, partition
    >>> part = load_partition(partition(tiny_graph(), 1, method="random", out=tempfile.mkdtemp() + "/p"), 0)
    >>> with one_rank_group():
    ...     halo = HaloExchange(part)
    ...     full = halo.exchange(0, torch.ones(part.num_inner, 3, requires_grad=True))
    >>> full.shape, halo.boundary_rows
    (torch.Size([10, 3]), 0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from graphdist import comm

TAG = "halo"


@dataclass
class _Stale:
    """One layer's stale buffers and the exchanges in flight that will refresh them."""

    halo: Optional[Tensor] = None  # [num_halo, d]: embeddings used in forward
    grad: Optional[Tensor] = None  # [num_inner, d]: halo gradients owed to this worker's rows
    forward_pending: Any = None
    backward_pending: Any = None


class HaloExchange:
    """The exchange plan of one worker and the per-layer exchanges (exact or stale).

    Args:
        partition: this worker's partition (inner rows over inner + halo columns).
        owners: which rank serves each node: anything with ``rank_of(ids)`` and ``world_size``
            (``sampling.owners.OwnerMap``, which the trainer builds from the plan); default part
            ``p`` on rank ``p``.
        group: process group of the exchanges (default: a new gloo group over all ranks).
        staleness: 0 (exact, synchronous) or 1 (pipelined: one iteration stale).
        smoothing: g in [0, 1) for stale buffers (0: use what was received as is).
        boundary_sample: p in (0, 1]: the share of boundary nodes kept each epoch (``set_epoch``).
        seed: seeds the boundary-node draws.
        wire_dtype: what a layer's exchanges travel as (``torch.float16`` or ``torch.bfloat16``: half
            the bytes); None: the embeddings' own dtype.

    Set-up is collective: every rank builds its exchange at the same point.
    """

    def __init__(self, partition: Any, owners: Any = None, group: Any = None, staleness: int = 0,
                 smoothing: float = 0.0, boundary_sample: float = 1.0, seed: int = 0,
                 wire_dtype: Optional[torch.dtype] = None) -> None:
        if staleness not in (0, 1):
            raise ValueError(f"--staleness must be 0 (exact) or 1 (one step stale) (got {staleness})")
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"--smoothing must lie in [0, 1) (got {smoothing})")
        if not 0.0 < boundary_sample <= 1.0:
            raise ValueError(f"--boundary-sample must lie in (0, 1] (got {boundary_sample})")
        if boundary_sample < 1.0 and staleness:
            raise ValueError("--boundary-sample < 1 needs --staleness 0 (stale buffers assume every boundary row)")
        self.staleness, self.smoothing = int(staleness), float(smoothing)
        self.boundary_sample, self.seed = float(boundary_sample), int(seed)
        self.wire_dtype = wire_dtype
        self.num_inner = int(partition.num_inner)
        self.num_halo = int(partition.num_halo)
        self.group = group if group is not None else comm.new_group()
        rank_of = owners.rank_of if owners is not None else partition.owner
        self.world_size = owners.world_size if owners is not None else int(partition.num_parts)
        # Halo nodes the inner rows actually read (a deeper halo holds more), grouped by owner.
        used = partition.indices[: int(partition.indptr[self.num_inner])].to(torch.int64)
        needed = torch.unique(used[used >= self.num_inner]) - self.num_inner
        halo_global = partition.global_ids[self.num_inner :].index_select(0, needed)
        by_owner = rank_of(halo_global)
        order = torch.argsort(by_owner, stable=True)
        self.recv_index = needed.index_select(0, order)  # halo slot of each received row, in arrival order
        self._recv_global = halo_global.index_select(0, order)
        requests = list(torch.split(halo_global.index_select(0, order),
                                    torch.bincount(by_owner, minlength=self.world_size).tolist()))
        self.recv_rows = [int(r.numel()) for r in requests]
        asked = comm.all_to_all_v(requests, group=self.group, tag=TAG) if self.world_size > 1 else requests
        self.send_index = [partition.inner_local(ids) for ids in asked]  # inner rows each peer needs
        self.send_rows = [int(s.numel()) for s in self.send_index]
        self._send_all = torch.cat(self.send_index) if self.send_index else torch.zeros(0, dtype=torch.int64)
        self._inner_global, self._num_nodes = partition.inner_global_ids(), int(partition.part_offsets[-1])
        self._full_plan = (self.recv_index, list(self.recv_rows), list(self.send_index), list(self.send_rows))
        self.kept_halo = torch.ones(self.num_halo, dtype=torch.bool)  # halo slots this epoch reads
        me = comm.get_rank() if comm.is_initialized() else 0
        self.boundary_rows = sum(n for r, n in enumerate(self.send_rows) if r != me)
        self._stale: dict[int, _Stale] = {}
        self.widths: dict[int, int] = {}  # per exchanged layer the width it last sent (the profiler's bytes)
        self.step = 0

    # ------------------------------------------------------------ sampling

    def set_epoch(self, epoch: int) -> None:
        """Draws this epoch's boundary nodes (``boundary_sample`` < 1); the same draw on every rank."""
        if self.boundary_sample >= 1.0:
            return
        recv_index, recv_rows, send_index, _ = self._full_plan
        every = torch.arange(self._num_nodes)
        kept = keep_boundary(every, epoch, self.seed, self.boundary_sample, self._num_nodes)  # one draw per epoch
        keep_recv = kept.index_select(0, self._recv_global)
        self.recv_index = recv_index[keep_recv]
        self.recv_rows = [int(k.sum()) for k in torch.split(keep_recv, recv_rows)]
        self.send_index = [idx[kept.index_select(0, self._inner_global.index_select(0, idx))] for idx in send_index]
        self.send_rows = [int(s.numel()) for s in self.send_index]
        self._send_all = torch.cat(self.send_index) if self.send_index else torch.zeros(0, dtype=torch.int64)
        self.kept_halo = torch.zeros(self.num_halo, dtype=torch.bool)
        self.kept_halo[self.recv_index] = True

    # ------------------------------------------------------------ collectives

    def _wire(self, rows: Tensor) -> Tensor:
        return rows if self.wire_dtype is None else rows.to(self.wire_dtype)

    def _start_forward(self, inner: Tensor, exact: bool = False) -> Any:
        payload = [inner.index_select(0, idx) for idx in self.send_index]
        if not exact:
            payload = [self._wire(rows) for rows in payload]
        return comm.all_to_all_v_async(payload, group=self.group, tag=TAG, recv_rows=self.recv_rows, duplex=True)

    def _halo_from(self, received: list[Tensor], like: Tensor) -> Tensor:
        halo = torch.zeros((self.num_halo, like.shape[1]), dtype=like.dtype)
        if self.recv_index.numel():
            halo.index_copy_(0, self.recv_index, _joined(received, like.dtype))
        return halo

    def _start_backward(self, grad_halo: Tensor) -> Any:
        rows = self._wire(grad_halo.index_select(0, self.recv_index))
        return comm.all_to_all_v_async(list(torch.split(rows, self.recv_rows)), group=self.group, tag=TAG,
                                       recv_rows=self.send_rows, duplex=True)

    def _grad_from(self, received: list[Tensor], like: Tensor) -> Tensor:
        grad = torch.zeros((self.num_inner, like.shape[1]), dtype=like.dtype)
        if self._send_all.numel():
            grad.index_add_(0, self._send_all, _joined(received, like.dtype))
        return grad

    def _smooth(self, old: Optional[Tensor], new: Tensor) -> Tensor:
        if old is None or self.smoothing == 0.0:
            return new
        return old.mul_(self.smoothing).add_(new, alpha=1.0 - self.smoothing)

    # ------------------------------------------------------------ per layer

    def fetch(self, inner: Tensor) -> Tensor:
        """``[num_halo, d]`` halo rows of a table that does not change (features, degrees): exact, no autograd."""
        if self.world_size == 1:
            return inner.new_zeros((self.num_halo, inner.shape[1]))
        return self._halo_from(self._start_forward(inner, exact=True).wait(), inner)

    def exchange(self, layer: int, inner: Tensor) -> Tensor:
        """``[num_inner + num_halo, d]``: ``inner`` and its halo rows, for layer ``layer``'s input.

        Exact: the halo rows are this iteration's (one exchange each way). Stale: last iteration's,
        while this one's travel. Differentiable in ``inner``: halo gradients reach their owners.
        """
        self.widths[int(layer)] = int(inner.shape[1])
        if self.world_size == 1:
            return torch.cat([inner, inner.new_zeros((self.num_halo, inner.shape[1]))])
        return _Exchange.apply(inner, self, int(layer))

    def drain(self) -> None:
        """Waits for the exchanges in flight and folds them into the stale buffers (end of an epoch)."""
        for state in self._stale.values():
            self._land_forward(state)
            self._land_backward(state)

    def _land_forward(self, state: _Stale) -> None:
        if state.forward_pending is not None:
            received = state.forward_pending.wait()
            state.halo = self._smooth(state.halo, self._halo_from(received, state.halo))
            state.forward_pending = None

    def _land_backward(self, state: _Stale) -> None:
        if state.backward_pending is not None:
            received = state.backward_pending.wait()
            state.grad = self._smooth(state.grad, self._grad_from(received, state.grad))
            state.backward_pending = None

    # ------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict[str, Any]:
        """The stale buffers (drained first), for a bit-identical resume."""
        self.drain()
        return {"step": self.step,
                "layers": {str(k): {"halo": v.halo, "grad": v.grad} for k, v in sorted(self._stale.items())}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state.get("step", 0))
        self._stale = {int(k): _Stale(halo=v["halo"], grad=v["grad"]) for k, v in state.get("layers", {}).items()}


def keep_boundary(ids: Tensor, epoch: int, seed: int, p: float, num_nodes: int) -> Tensor:
    """Whether each boundary node (global id) is kept this epoch: the same draw on every rank.

    One uniform number per node of the graph from a generator seeded by (seed, epoch): every
    rank draws the same vector (``num_nodes`` floats, once per epoch) and reads its nodes' entries.

    Example:
        >>> ids = torch.arange(100_000)
        >>> kept = keep_boundary(ids, epoch=3, seed=0, p=0.25, num_nodes=100_000)
        >>> round(kept.float().mean().item(), 2), torch.equal(kept[7:9], keep_boundary(ids[7:9], 3, 0, 0.25, 100_000))
        (0.25, True)
        >>> bool((kept != keep_boundary(ids, 4, 0, 0.25, 100_000)).any())
        True
    """
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    draws = torch.rand(int(num_nodes), generator=generator)
    return draws.index_select(0, ids.to(torch.int64)) < p


class _Exchange(torch.autograd.Function):
    """Forward: inner rows -> inner + halo rows. Backward: halo gradients back to their owners."""

    @staticmethod
    def forward(ctx: Any, inner: Tensor, ex: HaloExchange, layer: int) -> Tensor:  # type: ignore[override]
        ctx.ex, ctx.layer = ex, layer
        detached = inner.detach()
        state = ex._stale.get(layer)
        if ex.staleness == 0 or state is None or state.halo is None:
            halo = ex._halo_from(ex._start_forward(detached).wait(), detached)  # exact (and first stale step)
            ctx.exact = True
            if ex.staleness:
                ex._stale[layer] = _Stale(halo=halo.clone())
        else:
            ex._land_forward(state)  # last iteration's exchange, if still travelling
            halo = state.halo.clone()
            state.forward_pending = ex._start_forward(detached)  # lands next iteration
            ctx.exact = False
        return torch.cat([detached, halo])

    @staticmethod
    def backward(ctx: Any, grad_full: Tensor) -> tuple[Optional[Tensor], None, None]:  # type: ignore[override]
        ex, layer = ctx.ex, ctx.layer
        grad_full = grad_full.contiguous()
        grad_inner = grad_full[: ex.num_inner].clone()
        grad_halo = grad_full[ex.num_inner :]
        state = ex._stale.get(layer)
        if ctx.exact and (ex.staleness == 0 or state is None or state.grad is None):
            owed = ex._grad_from(ex._start_backward(grad_halo).wait(), grad_inner)
            if ex.staleness and state is not None:
                state.grad = owed.clone()
        else:
            ex._land_backward(state)
            owed = state.grad.clone() if state.grad is not None else torch.zeros_like(grad_inner)
            state.backward_pending = ex._start_backward(grad_halo.clone())
        grad_inner.add_(owed)
        return grad_inner, None, None



def _joined(received: list[Tensor], dtype: torch.dtype) -> Tensor:
    """The received rows in one tensor of ``dtype``: each piece cast before the join (the same values),
    because under a CPU autocast ``torch.cat`` refuses 16-bit wire rows (``--compress fp16`` with
    ``--precision bf16``)."""
    return torch.cat([r.to(dtype) for r in received])

__all__ = ["HaloExchange", "TAG", "keep_boundary"]
