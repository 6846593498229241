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

from typing import Any, Callable, Optional

import torch

__all__ = ["RowAdam", "is_row_wise", "mark_row_wise"]


def mark_row_wise(param: torch.nn.Parameter) -> torch.nn.Parameter:
    """Marks an embedding table (``[rows, dim]``) for lazy, row-wise updates (:class:`RowAdam`)."""
    param.row_wise = True  # type: ignore[attr-defined]
    return param


def is_row_wise(param: torch.nn.Parameter) -> bool:
    return bool(getattr(param, "row_wise", False)) and param.dim() == 2


class RowAdam(torch.optim.Adam):
    """``torch.optim.Adam`` (fused where it can be) whose ``rows`` groups step row-wise and lazily.

    A ``rows`` group's parameter keeps ``exp_avg``, ``exp_avg_sq``, ``row_step`` (per-row step counts) and
    ``step`` (the table's) in its state; its rows with an all-zero gradient are left as they are, moments
    included.
    """

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        lazy = [(group, p) for group in self.param_groups if group.get("rows") for p in group["params"]
                if p.grad is not None]
        grads = [p.grad for _, p in lazy]
        for _, p in lazy:  # the dense Adam skips parameters without a gradient
            p.grad = None
        try:
            loss = super().step(closure)
        finally:
            for (_, p), g in zip(lazy, grads):
                p.grad = g
        with torch.no_grad():
            for (group, p), g in zip(lazy, grads):
                self._row_step(group, p, g)
        return loss

    def _row_step(self, group: dict[str, Any], p: torch.Tensor, grad: torch.Tensor) -> None:
        rows, g = _nonzero_rows(grad)
        state = self.state[p]
        if not state:
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
            state["row_step"] = torch.zeros(p.shape[0], dtype=torch.float32, device=p.device)
            state["step"] = torch.tensor(0.0)  # the table's steps, as torch's Adam keeps them (its load reads it)
        state["step"] += 1
        if not rows.numel():
            return
        beta1, beta2 = group["betas"]
        w = p.index_select(0, rows)
        if group["weight_decay"]:
            g = g.add(w, alpha=group["weight_decay"])
        step = state["row_step"].index_select(0, rows).add_(1)
        state["row_step"].index_copy_(0, rows, step)
        m = state["exp_avg"].index_select(0, rows).mul_(beta1).add_(g, alpha=1 - beta1)
        v = state["exp_avg_sq"].index_select(0, rows).mul_(beta2).addcmul_(g, g, value=1 - beta2)
        state["exp_avg"].index_copy_(0, rows, m)
        state["exp_avg_sq"].index_copy_(0, rows, v)
        bias1 = (1 - beta1 ** step).unsqueeze(1)
        bias2 = (1 - beta2 ** step).unsqueeze(1)
        update = (m / bias1) / ((v / bias2).sqrt_().add_(group["eps"]))
        p.index_copy_(0, rows, w.sub_(update, alpha=group["lr"]))


def _nonzero_rows(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, values)``: the rows of ``grad`` (dense, or sparse as an ``nn.Embedding(sparse=True)`` gives)
    with a non-zero entry, and their gradient."""
    if grad.is_sparse:
        grad = grad.coalesce()
        rows, values = grad.indices()[0], grad.values()
        keep = values.ne(0).any(dim=1)
        return (rows, values) if bool(keep.all()) else (rows[keep], values[keep])
    rows = grad.ne(0).any(dim=1).nonzero().view(-1)
    return rows, grad.index_select(0, rows)
