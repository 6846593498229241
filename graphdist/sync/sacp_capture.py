"""What SACP (``graphdist.sync.sacp``) reads to decide and send: each Linear's input rows and output
gradients, each embedding table's rows looked up, every rank's rows per step, and Poseidon's rules.

:class:`LinearCapture` keeps this step's rows by forward hooks and a tensor hook on each output, so
the user's model needs no change; :class:`RowCounts` sends every rank's rows per Linear in one
all-gather when forward returns, so every rank picks the same scheme for a layer.

Example:
    >>> sacp_choice(k_rows=[16, 20], out_features=2048, in_features=2048)
    'sfb'
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional, Sequence

import torch
from torch import nn

from graphdist import comm
from graphdist.sync.hooks import SeedWeights

def is_linear(module: nn.Module) -> bool:
    """A ``torch.nn.Linear`` or PyG's ``torch_geometric.nn.Linear`` (``y = x W^T + b``)."""
    if isinstance(module, nn.Linear):
        return True
    cls = type(module)
    return cls.__name__ == "Linear" and cls.__module__.startswith("torch_geometric")


def sparse_rows_choice(k_rows: list[int], num_rows: int, dim: int, world_size: Optional[int] = None,
                       dense_bytes: float = 4.0) -> str:
    """``"sparse"`` iff sending the touched rows (float32 values and an int64 index) to every peer,
    ``max_r K_r (4 D + 8)`` bytes per peer, beats the ring's ``2 V D / P`` values of ``dense_bytes``
    each (``graphdist.sync.compress.wire_bytes``); else ``"dense"``.

    Example:
        >>> sparse_rows_choice([40, 10], num_rows=100_000, dim=64)
        'sparse'
    """
    size = len(k_rows) if world_size is None else world_size
    sparse = max(k_rows, default=0) * (4.0 * dim + 8.0)
    return "sparse" if sparse <= 2 * num_rows * dim * dense_bytes / max(1, size) else "dense"


def is_dense_embedding(module: nn.Module) -> bool:
    """An ``nn.Embedding`` with dense gradients (``sparse=True`` tables are not in the layer-wise sync)."""
    return isinstance(module, nn.Embedding) and not module.sparse


def sacp_choice(k_rows: list[int], out_features: int, in_features: int, world_size: Optional[int] = None,
                factor_bytes: float = 4.0, dense_bytes: float = 4.0) -> str:
    """``"sfb"`` iff ``max_r K_r (M + N) b_f <= 2 M N b_d / P`` (Poseidon's rule, in bytes), else ``"dense"``.

    ``b_f``: bytes a factor value travels in; ``b_d``: bytes a value of the dense allreduce costs
    (``graphdist.sync.compress.wire_bytes``). Under ``--compress int8`` the dense payload shrinks
    to a quarter while the factors travel in float32, so factors must be 4x fewer to pay.

    Example:
        >>> sacp_choice([200], 512, 512, world_size=2), sacp_choice([200], 512, 512, 2, dense_bytes=1.0)
        ('sfb', 'dense')
    """
    size = len(k_rows) if world_size is None else world_size
    m, n = out_features, in_features
    factors = max(k_rows, default=0) * (m + n) * factor_bytes
    return "sfb" if factors <= 2 * m * n * dense_bytes / max(1, size) else "dense"


class LinearCapture:
    """This step's input rows and output gradients of every Linear in ``model``, and the rows of
    every embedding table it looked up, kept by hooks.

    Args:
        model: the model whose Linears and embedding tables are watched.
        prune_for: the number of ranks; when given, a Linear whose rows on this rank alone rule
            factors out for that many ranks keeps only its row count this step (it will go
            dense); None keeps every Linear's factors.
        keep: Linears that keep their factors whatever their rows (forced by an override).
        factor_bytes, dense_bytes: what the pruning rule weighs (:func:`sacp_choice`).

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 2))
        >>> cap = LinearCapture(net)
        >>> net(torch.ones(5, 3)).sum().backward()
        >>> cap.rows(net[0]), cap.factors(net[0])[0].shape, cap.factors(net[0])[1].shape
        (5, torch.Size([5, 2]), torch.Size([5, 3]))
    """

    def __init__(self, model: nn.Module, prune_for: Optional[int] = None, keep: Sequence[nn.Module] = (),
                 factor_bytes: float = 4.0, dense_bytes: float = 4.0) -> None:
        self.linears = [m for m in model.modules() if is_linear(m)]
        self.embeddings = [m for m in model.modules() if is_dense_embedding(m)]
        self.modules = self.linears + self.embeddings  # the order of RowCounts' columns
        self.prune_for = prune_for
        self.wire = (factor_bytes, dense_bytes)
        self._keep = {id(m) for m in keep}  # Linears forced to factors (--sacp-override): always kept
        self._pruned: set[int] = set()
        self._rows: dict[int, int] = defaultdict(int)
        self._inputs: dict[int, list[torch.Tensor]] = defaultdict(list)
        self._grads: dict[int, list[torch.Tensor]] = {}  # filled by _keep_grad, into lists made at forward
        self._touched: dict[int, torch.Tensor] = {}
        self._low_precision: set[int] = set()  # Linears whose product ran under autocast (--precision bf16)
        self._handles = {id(m): m.register_forward_hook(self._on_forward) for m in self.linears}
        self._handles.update({id(m): m.register_forward_hook(self._on_lookup) for m in self.embeddings})

    def rules_out(self, module: nn.Module, k_max: int, margin: float = 1.0) -> bool:
        """Whether ``k_max`` rows (the largest over ranks), ``margin`` times fewer, still rule factors (or a
        table's touched rows) out for ``prune_for`` ranks: the layer goes dense by a ``margin`` fold."""
        k = int(k_max / margin)
        size = self.prune_for or 1
        if is_dense_embedding(module):
            return sparse_rows_choice([k], *module.weight.shape, size, self.wire[1]) == "dense"
        return sacp_choice([k], *module.weight.shape, size, *self.wire) == "dense"

    def stop_watching(self, module: nn.Module) -> None:
        """Removes ``module``'s hooks: it goes dense from now on, and its rows are not kept or counted."""
        handle = self._handles.pop(id(module), None)
        if handle is not None:
            handle.remove()

    def _on_lookup(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if torch.is_grad_enabled() and isinstance(output, torch.Tensor) and output.requires_grad:
            self._inputs[id(module)].append(inputs[0].detach().reshape(-1))
            self._touched.pop(id(module), None)

    def touched(self, module: nn.Module) -> torch.Tensor:
        """The distinct rows of an embedding table looked up this step, ascending (int64)."""
        key = id(module)
        if key not in self._touched:
            looked = self._inputs.get(key, [])
            flat = torch.cat(looked).to(torch.int64) if looked else torch.zeros(0, dtype=torch.int64)
            self._touched[key] = torch.unique(flat)
        return self._touched[key]

    def _on_forward(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if not (torch.is_grad_enabled() and isinstance(output, torch.Tensor) and output.requires_grad):
            return
        key = id(module)
        x = inputs[0].detach().reshape(-1, inputs[0].shape[-1])
        self._rows[key] += int(x.shape[0])
        if torch.is_autocast_enabled(x.device.type):
            self._low_precision.add(key)
        if key in self._pruned:
            return
        m, n = module.weight.shape
        if (self.prune_for is not None and key not in self._keep
                and sacp_choice([self._rows[key]], m, n, self.prune_for, *self.wire) == "dense"):
            # This rank's K alone already rules factors out (the rule takes the max over ranks), so
            # the layer goes dense: holding its inputs and output gradients (a K x M tensor kept
            # alive until the next step) would only cost memory and fresh allocations.
            self._pruned.add(key)
            self._inputs.pop(key, None)
            self._grads.pop(key, None)
            return
        self._inputs[key].append(x)
        self._grads.setdefault(key, [])  # the list the hook appends to
        output.register_hook(lambda g: self._keep_grad(key, g))

    def _keep_grad(self, key: int, g: torch.Tensor) -> None:
        # Looked up when the gradient arrives: a later call this step may have pruned the layer,
        # and then its earlier calls' gradients are not kept either.
        grads = self._grads.get(key)
        if grads is not None:
            grads.append(g.detach().reshape(-1, g.shape[-1]))

    def low_precision(self, module: nn.Module) -> bool:
        """Whether the Linear ran under autocast this step: autograd's gradient of it is then a 16-bit product's."""
        return id(module) in self._low_precision

    def reset(self) -> None:
        self._low_precision.clear()
        self._rows.clear()
        self._pruned.clear()
        self._inputs.clear()
        self._grads.clear()
        self._touched.clear()

    def rows(self, module: nn.Module) -> int:
        """K: input rows a Linear saw this step, or distinct rows an embedding table gave (0 if unused)."""
        if is_dense_embedding(module):
            return int(self.touched(module).numel())
        return self._rows.get(id(module), 0)

    def factors(self, module: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """``(U, V)``: ``K x M`` output gradients and ``K x N`` inputs, so that ``dW = U^T V``.

        Raises:
            RuntimeError: the Linear ran more times than it got output gradients for.
        """
        if id(module) in self._pruned:
            raise RuntimeError(f"SACP: this Linear's {self._rows[id(module)]} rows rule factors out for "
                               f"{self.prune_for} ranks, so none were kept; it goes dense")
        xs, gs = self._inputs.get(id(module), []), self._grads.get(id(module), [])
        if len(xs) != len(gs):
            raise RuntimeError(f"SACP: a Linear ran {len(xs)} times this step but {len(gs)} output gradients "
                               f"arrived; its output did not all reach the loss; use --sacp off")
        weight = module.weight
        if not xs:
            return weight.new_zeros(0, weight.shape[0]), weight.new_zeros(0, weight.shape[1])
        # Gradients arrive in reverse order of the calls; pair them back up.
        return torch.cat(gs[::-1]), torch.cat(xs)

    def close(self) -> None:
        for h in self._handles.values():
            h.remove()
        self._handles = {}


# A layer whose rows, halved, still ruled factors out on every rank for this many steps in a row goes dense
# for the rest of the run (:meth:`RowCounts.note_dense`). Measured on the quickstart's workload (2 workers,
# 2 cores), where every layer goes dense: watching the layers and gathering their rows cost the step 0.5 ms of
# its core and ~1 ms of wall time (10 ms steps). Settling is exact: a dense layer sends the same gradient.
SETTLE_STEPS = 4
SETTLE_MARGIN = 2.0


class RowCounts(SeedWeights):
    """Seed counts, as :class:`SeedWeights` sends them, plus every Linear's input rows, every rank's.

    The seed count goes out when the step begins, so ``N`` has landed before backward (both
    ranks start a step together, after the previous step's gradients). The rows are known only
    when the model's forward returns: every rank's ``[K_r,1 .. K_r,L]`` are gathered then, without
    waiting (:meth:`issue`, ``comm.all_gather_rows_async``). Only a layer that might go
    as factors waits for that table. Waiting for it at the first layer's hook was a barrier in
    mid-step, where a rank whose forward ended first waited for the other's.

    A layer that went dense by a wide margin for ``SETTLE_STEPS`` steps in a row is *settled*: its
    hooks go and it is dense from then on; once every layer is settled, no rows are gathered at all
    (every rank reads the same tables, so all settle at the same step; the checkpoint keeps the set).
    """

    def __init__(self, capture: LinearCapture, group: Any = None, tag: str = "grad",
                 normalize: bool = True) -> None:
        super().__init__(group, tag, normalize)
        self.capture = capture
        self._issued_rows: Optional[list[int]] = None
        self._rows: Optional[torch.Tensor] = None
        self._rows_handle: Optional[comm.Handle] = None
        self._table: Optional[torch.Tensor] = None
        self.active = False  # no step begun yet: an evaluation's forward issues nothing
        self.settled: set[int] = set()  # indices into capture.modules that go dense for good
        self._streak = [0] * len(capture.modules)

    def begin_step(self, num_seeds: int) -> None:
        self.settle()
        self.note_dense(self._table if self._table is not None else self._rows)
        self._issued_rows, self._rows, self._table = None, None, None
        super().begin_step(num_seeds)
        self.capture.reset()
        self.active = True

    def note_dense(self, table: Optional[torch.Tensor]) -> None:
        """Counts, from the last step's table of every rank's rows, the steps each layer went dense by
        ``SETTLE_MARGIN``; settles those at ``SETTLE_STEPS`` (a layer forced to factors never settles)."""
        if table is None:
            return
        keep = self.capture._keep
        for i, module in enumerate(self.capture.modules):
            if i in self.settled or id(module) in keep:
                continue
            k_max = int(round(float(table[:, i].max()))) if table.numel() else 0
            dense = self.capture.rules_out(module, k_max, SETTLE_MARGIN)
            self._streak[i] = self._streak[i] + 1 if dense else 0
            if self._streak[i] >= SETTLE_STEPS:
                self.settle_layers([i])

    def settle_layers(self, indices: Sequence[int]) -> None:
        """Sends the layers ``indices`` (into ``capture.modules``) dense for the rest of the run."""
        for i in indices:
            self.settled.add(int(i))
            self.capture.stop_watching(self.capture.modules[int(i)])

    def is_settled(self, module: nn.Module) -> bool:
        """Whether ``module`` goes dense for good (:meth:`note_dense`)."""
        return self.capture.modules.index(module) in self.settled

    def issue(self) -> None:
        """Starts the exchange of this step's rows (once per step; none once every layer is settled)."""
        if self._issued_rows is not None or not self.active or len(self.settled) == len(self.capture.modules):
            return
        rows = [self.capture.rows(m) for m in self.capture.modules]
        self._issued_rows = rows
        if group_size() > 1 and rows:
            self._rows, self._rows_handle = comm.all_gather_rows_async(rows, group=self.group, tag=self.tag)
        else:
            self._table = torch.tensor([rows], dtype=torch.float64).view(group_size(), len(rows))

    def _wait(self) -> torch.Tensor:
        self.issue()
        if self._table is None:
            self._timed_wait(self._rows_handle)
            self._rows_handle, self._table = None, self._rows
        return self._table

    def settle(self) -> None:
        """Completes a table no layer waited for (every layer went dense on its own rows): it has
        landed, since the step's gradients went out after it on every rank; a failure surfaces here."""
        if self._rows_handle is not None:
            self._rows_handle.wait()
            self._rows_handle = None

    def rows_of(self, module: nn.Module) -> list[int]:
        """Every rank's K for ``module`` this step (as issued; waits for the table)."""
        index = self.capture.modules.index(module)
        return [int(round(float(v))) for v in self._wait()[:, index]]

    def issued_rows(self, module: nn.Module) -> int:
        """This rank's K for ``module`` this step (issues the table if forward has not; -1 outside a step)."""
        self.issue()
        return self._issued_rows[self.capture.modules.index(module)] if self._issued_rows is not None else -1


def group_size() -> int:
    """Ranks in the process group, 1 without one (not the ``WORLD_SIZE`` a launcher set: before its group
    exists a rank sends nothing)."""
    return comm.get_world_size() if comm.is_initialized() else 1


__all__ = ["LinearCapture", "RowCounts", "group_size", "is_dense_embedding", "is_linear", "sacp_choice",
           "sparse_rows_choice"]
