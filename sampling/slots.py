"""A loader process's shared-memory slots, and how a batch lies in one (``sampling.loader_procs``).

A slot is a pair of shared tensors: the batch's feature rows, and its id arrays (input nodes, seeds, each block's
``src``, ``dst`` and ``indptr``) one after another. The loader writes a batch into a slot and sends only its
:class:`Layout`; the worker rebuilds the batch as views (:func:`assemble`), with no copy.

Example:
    >>> slot = Slot(); _ = slot.fit(rows=2, width=3, dtype=torch.float32, ids=6)
    >>> slot.ids[:6] = torch.tensor([4, 9, 4, 1, 0, 1]); slot.x[:2] = 1.0
    >>> batch = assemble(slot.x, slot.ids, Layout(2, [2, 1, 1, 1, 2], [(2, 1)], {}, 0.0, 0.0))
    >>> batch.input_nodes.tolist(), batch.seed_nodes.tolist(), batch.blocks[0].src.tolist(), batch.x.shape
    ([4, 9], [4], [1], torch.Size([2, 3]))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from sampling.base import Block, SampledBatch

__all__ = ["Layout", "Slot", "assemble", "from_plain", "id_arrays", "to_plain"]


@dataclass
class Layout:
    """Where a batch lies in its slot: rows of ``x``, the id arrays' lengths, each block's size; and times."""

    rows: int
    lengths: list[int]
    sizes: list[tuple[int, int]]
    meta: dict[str, Any]
    sample_s: float
    gather_s: float
    counters: Optional[dict[str, int]] = None  # the feature source's traffic counters for this batch
    traffic: Optional[dict[str, dict[str, float]]] = None  # bytes, calls and seconds of its collectives (comm.COUNTER)
    # a typed graph's batch: the nodes' types and rows within them follow the seeds, and each block's
    # edge relations follow its indptr
    typed: bool = False


def id_arrays(batch: SampledBatch) -> list[Tensor]:
    """The batch's id arrays in the order a slot holds them (:func:`assemble` reads them back)."""
    typed = bool(batch.blocks) and batch.blocks[0].typed
    arrays = [batch.input_nodes, batch.seed_nodes]
    if typed:
        arrays += [batch.blocks[0].node_type, batch.blocks[0].type_index]
    for block in batch.blocks:
        if block.edge_weight is not None:
            raise ValueError("loader processes carry no edge weights (a sampler that sets them: use --loaders 0)")
        arrays += [block.src, block.dst, block.indptr] + ([block.edge_type] if typed else [])
    return arrays


class Slot:
    """A loader's pair of shared buffers: features ``x`` and the batch's concatenated int64 ids."""

    def __init__(self) -> None:
        self.x: Optional[Tensor] = None
        self.ids: Optional[Tensor] = None

    def fit(self, rows: int, width: int, dtype: torch.dtype, ids: int) -> bool:
        """Grows the buffers (25% headroom) to hold ``rows`` feature rows and ``ids`` ids; True if new ones were made."""
        grown = False
        if width and (self.x is None or self.x.shape[0] < rows):
            self.x = torch.empty((rows + rows // 4 + 1, width), dtype=dtype).share_memory_()
            grown = True
        if self.ids is None or self.ids.numel() < ids:
            self.ids = torch.empty(ids + ids // 4 + 1, dtype=torch.int64).share_memory_()
            grown = True
        return grown


def to_plain(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with tensors as numpy arrays: pickled by value, not as shared memory of their own."""
    return {k: v.numpy() if isinstance(v, Tensor) else v for k, v in meta.items()}


def from_plain(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in meta.items()}


def assemble(x: Optional[Tensor], ids: Tensor, layout: Layout) -> SampledBatch:
    """The batch a slot holds, as views (no copy)."""
    arrays, at = [], 0
    for n in layout.lengths:
        arrays.append(ids[at:at + n])
        at += n
    head, per = (4, 4) if layout.typed else (2, 3)
    blocks = [Block(src=arrays[head + per * i], dst=arrays[head + 1 + per * i], indptr=arrays[head + 2 + per * i],
                    num_src=s, num_dst=d)
              for i, (s, d) in enumerate(layout.sizes)]
    if layout.typed:
        for i, block in enumerate(blocks):
            block.edge_type = arrays[head + 3 + per * i]
            block.node_type, block.type_index = arrays[2][: block.num_src], arrays[3][: block.num_src]
    return SampledBatch(blocks=blocks, input_nodes=arrays[0], seed_nodes=arrays[1],
                        x=x[: layout.rows] if x is not None else None, meta=from_plain(layout.meta))
