"""The feature table a worker serves, and how a batch becomes model inputs.

GCN needs every node's global in-degree, including remote ones: the degrees travel as one
extra last column of the feature table, so remote nodes' degrees come with their features
(same fetch, same cache) and :func:`model_inputs` splits the column off again.

Example:
    >>> import torch
    >>> x, blocks = model_inputs(torch.ones(3, 2), [], with_degrees=False)
    >>> x.shape
    torch.Size([3, 2])
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from graphdist.config import FEATURE_NORMS
from partition.part import Partition


def normalize_features(x: torch.Tensor, how: str) -> torch.Tensor:
    """``row``: each row divided by the sum of its absolute values (rows of zeros stay 0); ``none``: ``x`` itself.

    For non-negative features (Planetoid's bag-of-words) that is the row sum. Signed features
    (the generated graphs') are divided by their L1 norm too: their plain sum can be near zero or
    negative, which made ``row`` scale them by up to 1e12 (training losses of 1e11).

    Example:
        >>> normalize_features(torch.tensor([[1.0, 3.0], [0.0, 0.0], [1.0, -3.0]]), "row").tolist()
        [[0.25, 0.75], [0.0, 0.0], [0.25, -0.75]]
    """
    if how not in FEATURE_NORMS:
        raise ValueError(f"--feature-norm must be one of {', '.join(FEATURE_NORMS)} (got {how!r})")
    if how == "none":
        return x
    return x / x.abs().sum(dim=1, keepdim=True).clamp(min=1e-12)


def feature_table(part: Partition, how: str, with_degrees: bool) -> torch.Tensor:
    """The ``[num_inner, F (+1)]`` rows this worker serves: normalised features, and the degree column.

    Example:
        >>> import tempfile
        >>> from graphdist.testing import tiny_graph
        >>> from partition.api import load_partition, partition
        >>> part = load_partition(partition(tiny_graph(), 1, method="random", out=tempfile.mkdtemp() + "/p"), 0)
        >>> feature_table(part, "none", with_degrees=True).shape[1] == part.x.shape[1] + 1
        True
    """
    if part.x is None:
        raise ValueError(f"partition {part.name}: has no features (x.npy); training needs node features")
    table = normalize_features(part.x, how)
    if with_degrees:
        table = torch.cat([table, part.in_degrees().to(table.dtype).view(-1, 1)], dim=1)
    return table


def replicated_feature_table(partitions: Any, how: str, with_degrees: bool, own: Any, own_table: torch.Tensor
                             ) -> torch.Tensor:
    """Every part's feature table (``feature_table``) in global-id order: ``--replicate graph``.

    ``own`` is this worker's part, whose table ``own_table`` is already built.
    """

    mine = dict(zip(own.parts, torch.split(own_table, [b - a for a, b in own.inner_ranges])))
    return torch.cat([mine[p] if p in mine else feature_table(partitions.part(p, verify=False), how, with_degrees)
                      for p in range(partitions.num_parts)])


def model_inputs(x: torch.Tensor, blocks: list[Any], with_degrees: bool) -> tuple[torch.Tensor, list[Any]]:
    """Splits the degree column off ``x`` and normalises the blocks with it (GCN); else as given."""
    if not with_degrees:
        return x, blocks
    from graphdist.models import gcn_norm_block

    degrees = x[:, -1]
    return x[:, :-1], [gcn_norm_block(b, degrees[: b.num_src]) for b in blocks]


class TableLabels:
    """Labels of every node by global id in one tensor, on the device a rank samples on (``--sample-on device``):
    seeds handed over by other workers need nothing added (:meth:`extend` keeps nothing), and a lookup answers on
    the ids' own device (the rebalancer asks with host ids, training with device ids).

    Example:
        >>> labels = TableLabels(torch.tensor([7, 8, 9]))
        >>> labels.extend(torch.tensor([0]), torch.tensor([7]))
        >>> labels(torch.tensor([2, 0])).tolist(), labels.device
        ([9, 7], device(type='cpu'))
    """

    def __init__(self, y: torch.Tensor) -> None:
        self.y = y

    @property
    def device(self) -> torch.device:
        return self.y.device

    def extend(self, ids: torch.Tensor, labels: torch.Tensor) -> None:
        """Nothing to add: every node's label is in the table."""

    def __call__(self, nodes: torch.Tensor) -> torch.Tensor:
        return self.y.index_select(0, nodes.to(self.y.device)).to(nodes.device)


class GlobalLabels:
    """Labels by global id: this worker's inner nodes, and seeds migrated to it from other workers.

    Example:
        >>> labels = GlobalLabels(torch.tensor([7, 8, 9]), inner_local=lambda g: g - 10)
        >>> labels.extend(torch.tensor([3]), torch.tensor([5]))
        >>> labels(torch.tensor([12, 10, 3])).tolist()
        [9, 7, 5]
    """

    def __init__(self, y: torch.Tensor, inner_local: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """``inner_local`` maps global ids to rows of ``y`` (``Partition.inner_local``: -1 elsewhere)."""
        self.y, self.inner_local = y, inner_local
        self._extra = (torch.empty(0, dtype=torch.int64), y[:0])  # (sorted ids, labels)

    def extend(self, ids: torch.Tensor, labels: torch.Tensor) -> None:
        """Adds labels of nodes other workers own (seeds they handed over)."""
        known, values = self._extra
        all_ids, all_labels = torch.cat([known, ids.to(torch.int64)]), torch.cat([values, labels.to(values.dtype)])
        order = torch.argsort(all_ids)
        # One assignment: the prefetch thread may be reading the old pair meanwhile.
        self._extra = (all_ids[order], all_labels[order])

    def __call__(self, nodes: torch.Tensor) -> torch.Tensor:
        local = self.inner_local(nodes)
        inner = (local >= 0) & (local < self.y.shape[0])
        if bool(inner.all()):
            return self.y.index_select(0, local)
        known, values = self._extra
        out = torch.empty(nodes.shape[0], dtype=self.y.dtype)
        out[inner] = self.y.index_select(0, local[inner])
        other = nodes[~inner]
        pos = torch.searchsorted(known, other).clamp(max=max(0, known.numel() - 1))
        if known.numel() == 0 or not bool((known[pos] == other).all()):
            raise KeyError(f"labels: {int((~inner).sum())} seed(s) neither inner nor handed over to this worker")
        out[~inner] = values.index_select(0, pos)
        return out


__all__ = ["GlobalLabels", "TableLabels", "feature_table", "model_inputs", "normalize_features", "replicated_feature_table"]
