"""Adam that updates an embedding table's rows only where this step's gradient touched them (lazy, row-wise).

A featureless node type gets a learnable table (``graphdist.models.hetero.TypedEncoder``) of one row per node:
millions of rows, of which a step looks up a few thousand. Plain Adam updates every row every step (its
moments decay and every row moves, with a zero gradient), a dense pass over the whole table; here a table
marked ``row_wise`` (:func:`mark_row_wise`) moves only its rows with a non-zero gradient, each with its
own step count for the bias correction, as TensorFlow's LazyAdam and DGL's sparse Adam do. After the
gradient sync the non-zero rows are those any rank touched, so every rank updates the same rows.

The gradient may be dense or sparse: graphdist's own tables are ``nn.Embedding(sparse=True)``, whose
touched rows every gradient sync exchanges as they are (``graphdist.sync.tables``); a user's dense table
works too. Why not ``torch.optim.SparseAdam``: it takes sparse gradients only, and keeps no weight
decay; one optimizer here serves the dense parameters and the tables alike.

Example:
    >>> table = mark_row_wise(torch.nn.Parameter(torch.zeros(4, 2)))
    >>> opt = RowAdam([{"params": [table], "rows": True}], lr=0.1)
    >>> table.grad = torch.tensor([[0.0, 0.0], [1.0, -1.0], [0.0, 0.0], [0.0, 0.0]]); opt.step()
    >>> [round(v, 4) for v in table.detach()[:, 0].tolist()]  # only row 1 moved
    [0.0, -0.1, 0.0, 0.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from graphdist import comm
from graphdist.sync.tables import touched_rows

__all__ = ["RowAdam", "RowShard", "is_row_wise", "mark_row_wise"]


def mark_row_wise(param: torch.nn.Parameter) -> torch.nn.Parameter:
    """Marks an embedding table (``[rows, dim]``) for lazy, row-wise updates (:class:`RowAdam`)."""
    param.row_wise = True  # type: ignore[attr-defined]
    return param


def is_row_wise(param: torch.nn.Parameter) -> bool:
    return bool(getattr(param, "row_wise", False)) and param.dim() == 2


@dataclass(frozen=True)
class RowShard:
    """Which rows of each table this rank keeps Adam state for and updates: the ``rank``-th of ``size``
    contiguous shares of ``ceil(rows / size)`` (ZeRO's stage 1, for tables only).

    Every rank must step on the same summed gradient (after a gradient sync's table exchange); the owners'
    updated rows are then sent to every rank, so the tables stay equal everywhere while each rank holds
    ``1 / size`` of the moments.

    Example:
        >>> RowShard(1, 2).bounds(5), RowShard(1, 4).bounds(3)
        ((3, 5), (1, 2))
    """

    rank: int
    size: int
    group: Any = None

    def bounds(self, num_rows: int) -> tuple[int, int]:
        per = -(-num_rows // self.size)
        lo = min(self.rank * per, num_rows)
        return lo, min(lo + per, num_rows)


_SHARDED = ("exp_avg", "exp_avg_sq", "row_step")  # a table's per-row state: what a shard holds a share of


class RowAdam(torch.optim.Adam):
    """``torch.optim.Adam`` (fused where it can be) whose ``rows`` groups step row-wise and lazily.

    A ``rows`` group's parameter keeps ``exp_avg``, ``exp_avg_sq``, ``row_step`` (per-row step counts),
    ``step`` (the table's) and ``rows`` (the ``(lo, hi)`` rows those are of) in its state; its rows with an
    all-zero gradient are left as they are, moments included. With ``shard`` (:class:`RowShard`) a rank
    holds its share of the per-row state only; :meth:`gathered_state_dict` puts the whole state together
    for a checkpoint, and :meth:`load_state_dict` keeps this rank's share of a whole one.
    """

    def __init__(self, params: Any, shard: Optional[RowShard] = None, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.shard = shard if shard is not None and shard.size > 1 else None

    def _tables(self) -> list[tuple[dict[str, Any], torch.Tensor]]:
        return [(group, p) for group in self.param_groups if group.get("rows") for p in group["params"]]

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        # Sharded, every table steps on every rank, with a gradient or not: the owners' rows are gathered.
        lazy = [(group, p) for group, p in self._tables() if p.grad is not None or self.shard]
        grads = [p.grad for _, p in lazy]
        for _, p in lazy:  # the dense Adam skips parameters without a gradient
            p.grad = None
        try:
            loss = super().step(closure)
        finally:
            for (_, p), g in zip(lazy, grads):
                p.grad = g
        # A fused Adam takes the loss scale from a GradScaler as these two attributes instead of unscaled
        # gradients; the rows must unscale themselves, and skip a step with an inf as the dense kernel does
        # (every rank holds the same synced gradients, so all skip alike and no exchange is left unmatched).
        grad_scale, found_inf = getattr(self, "grad_scale", None), getattr(self, "found_inf", None)
        if found_inf is not None and bool(found_inf.item()):
            return loss
        unscale = None if grad_scale is None else 1.0 / float(grad_scale)
        with torch.no_grad():
            for (group, p), g in zip(lazy, grads):
                self._row_step(group, p, g, unscale)
        return loss

    def _row_step(self, group: dict[str, Any], p: torch.Tensor, grad: Optional[torch.Tensor],
                  unscale: Optional[float] = None) -> None:
        rows, g = touched_rows(grad, p, nonzero=True)
        if unscale is not None:
            g = g * unscale
        lo, hi = self.shard.bounds(p.shape[0]) if self.shard else (0, p.shape[0])
        state = self.state[p]
        if not state:
            state["exp_avg"] = p.new_zeros((hi - lo, p.shape[1]))
            state["exp_avg_sq"] = p.new_zeros((hi - lo, p.shape[1]))
            state["row_step"] = torch.zeros(hi - lo, dtype=torch.float32, device=p.device)
            state["step"] = torch.tensor(0.0)  # the table's steps, as torch's Adam keeps them (its load reads it)
            state["rows"] = (lo, hi)
        state["step"] += 1
        if self.shard:
            own = (rows >= lo) & (rows < hi)
            rows, g = rows[own], g[own]
        if rows.numel():
            new = self._moved(group, state, p, rows, g, lo)
        else:
            new = p[:0]
        if self.shard:
            rows, new = comm.exchange_rows(rows, new, group=self.shard.group, tag="grad")
        if rows.numel():
            p.index_copy_(0, rows, new)

    @staticmethod
    def _moved(group: dict[str, Any], state: dict[str, Any], p: torch.Tensor, rows: torch.Tensor, g: torch.Tensor,
               lo: int) -> torch.Tensor:
        """The new values of table rows ``rows`` (gradient ``g``); their state (at ``rows - lo``) updated."""
        beta1, beta2 = group["betas"]
        at = rows - lo if lo else rows
        w = p.index_select(0, rows)
        if group["weight_decay"]:
            g = g.add(w, alpha=group["weight_decay"])
        step = state["row_step"].index_select(0, at).add_(1)
        state["row_step"].index_copy_(0, at, step)
        m = state["exp_avg"].index_select(0, at).mul_(beta1).add_(g, alpha=1 - beta1)
        v = state["exp_avg_sq"].index_select(0, at).mul_(beta2).addcmul_(g, g, value=1 - beta2)
        state["exp_avg"].index_copy_(0, at, m)
        state["exp_avg_sq"].index_copy_(0, at, v)
        bias1 = (1 - beta1 ** step).unsqueeze(1)
        bias2 = (1 - beta2 ** step).unsqueeze(1)
        update = (m / bias1) / ((v / bias2).sqrt_().add_(group["eps"]))
        return w.sub_(update, alpha=group["lr"])

    def gathered_state_dict(self) -> Optional[dict[str, Any]]:
        """The whole optimizer state on rank 0 (None on the others): sharded, every rank sends its share of each
        table's per-row state to rank 0 (a collective: every rank calls it); else :meth:`state_dict`.

        The shares are consecutive row ranges in rank order, so rank 0's receive buffer (host memory) is the
        whole tensor: no index travels and the shares are not joined by another copy. Rank 0 holds that whole
        copy beside its own share while the checkpoint is written (a mid-epoch checkpoint's writer copies it
        once more, as it copies every state).
        """
        if not self.shard:
            return self.state_dict()
        wholes = {}
        for _, p in self._tables():
            state = self.state.get(p) or {}
            for key in _SHARDED:
                mine = state.get(key)
                if mine is None:  # never stepped (then on no rank): nothing to gather
                    continue
                mine = mine.cpu()  # a checkpoint is written from host memory: no GPU holds the whole state
                parts = comm.all_to_all_v([mine if r == 0 else mine[:0] for r in range(self.shard.size)],
                                          group=self.shard.group, tag="checkpoint")
                if self.shard.rank == 0:
                    joined = comm.joined_rows(parts)
                    wholes[(id(p), key)] = joined if joined is not None else torch.cat(parts)
        if self.shard.rank != 0:
            return None
        out = self.state_dict()
        for index, (_, p) in zip(_table_indices(self), self._tables()):
            if index not in out["state"]:
                continue
            entry = out["state"][index] = dict(out["state"][index])  # torch's dict is the live state: not in place
            for key in _SHARDED:
                whole = wholes[(id(p), key)]
                if whole.shape[0] != p.shape[0]:
                    raise RuntimeError(f"optimizer state {key}: the ranks' shares of the {p.shape[0]}-row table did "
                                       f"not add up ({whole.shape[0]} rows came)")
                entry[key] = whole
            entry["rows"] = (0, p.shape[0])
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Torch's load, then each table's per-row state cut to this rank's share.

        Raises:
            ValueError: a table's saved state is one rank's share (``best.pt`` of a sharded run), not the whole.
        """
        # Torch's load casts every state tensor to its parameter's dtype and device: the per-row state is kept
        # out of it, cut to this rank's share on the host, and moved after (row_step stays float32).
        state_dict = {**state_dict, "state": dict(state_dict["state"])}
        rows_state = {}
        for index, (_, p) in zip(_table_indices(self), self._tables()):
            entry = state_dict["state"].get(index)
            if entry is None:
                continue
            saved = tuple(entry.get("rows", (0, p.shape[0])))
            if saved != (0, p.shape[0]):
                raise ValueError(f"the optimizer state holds rows {saved[0]}..{saved[1]} of a {p.shape[0]}-row table: one "
                                 "rank's share (best.pt of a sharded run); resume from the run's checkpoint.pt")
            rows_state[index] = {key: entry[key] for key in _SHARDED}
            state_dict["state"][index] = {k: v for k, v in entry.items() if k not in _SHARDED}
        super().load_state_dict(state_dict)
        for index, (_, p) in zip(_table_indices(self), self._tables()):
            if index not in rows_state:
                continue
            lo, hi = self.shard.bounds(p.shape[0]) if self.shard else (0, p.shape[0])
            state = self.state[p]
            for key, value in rows_state[index].items():
                dtype = torch.float32 if key == "row_step" else p.dtype
                state[key] = value[lo:hi].to(device=p.device, dtype=dtype, copy=True)
            state["rows"] = (lo, hi)


def _table_indices(opt: torch.optim.Optimizer) -> list[int]:
    """The ``state_dict`` indices of ``opt``'s ``rows`` groups' parameters (torch numbers them in group order)."""
    out, index = [], 0
    for group in opt.param_groups:
        for _ in group["params"]:
            if group.get("rows"):
                out.append(index)
            index += 1
    return out
