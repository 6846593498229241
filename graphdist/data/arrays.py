"""Array helpers the data layer shares: numpy or memory maps into tensors, CSR offsets from counts, row chunks.

``graphdist.data.graph`` (the ``Graph``) and ``graphdist.data.schema`` (typed graphs) both build on
these; neither imports the other's module for them.

Example:
    >>> as_tensor(np.arange(3), "ids").tolist(), counts_to_indptr(torch.tensor([2, 1])).tolist()
    ([0, 1, 2], [0, 2, 3])
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import torch

MASK_NAMES = ("train_mask", "val_mask", "test_mask")
_ArrayOrTensor = TypeVar("_ArrayOrTensor", np.ndarray, torch.Tensor)

def as_tensor(value: Any, name: str) -> torch.Tensor:
    """Turns a numpy array (memory maps included, no copy) or sequence into a tensor.

    Raises:
        ValueError: if ``value`` cannot be made into a tensor.
    """
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        if not value.flags.writeable:
            # torch.from_numpy warns on read-only arrays: a copy-on-write mapping
            # keeps a memory map mapped (no data read); anything else is copied.
            value = _cow_view(value) if isinstance(value, np.memmap) else value.copy()
        try:
            return torch.from_numpy(value)
        except TypeError as exc:  # object, string or non-native byte-order arrays
            raise ValueError(f"{name}: expected a numeric array (got dtype {value.dtype})") from exc
    try:
        return torch.as_tensor(value)
    except Exception as exc:  # noqa: BLE001 - report which field failed
        raise ValueError(f"{name}: expected an array or tensor (got {type(value).__name__})") from exc


def _cow_view(mm: np.memmap) -> np.ndarray:
    """A writable copy-on-write mapping of the same bytes of the file (no data copied).

    ``mm`` may be a view of a memory map (``mm[100:]``, ``mm[:, 1]``): numpy copies the
    parent's ``offset`` onto views, so the view's own start is found from its distance
    to the array that owns the mapping. Views that are not C-contiguous are copied.
    """
    root = mm
    while isinstance(root.base, np.ndarray):
        root = root.base
    if mm.filename is None or not mm.flags.c_contiguous or not isinstance(root, np.memmap):
        return np.array(mm)
    offset = mm.offset + (mm.ctypes.data - root.ctypes.data)
    return np.memmap(mm.filename, dtype=mm.dtype, mode="c", offset=offset, shape=mm.shape)



def counts_to_indptr(counts: _ArrayOrTensor) -> _ArrayOrTensor:
    """``[0, c0, c0+c1, ...]`` as int64, of the same kind as ``counts``: a numpy array or a tensor.

    The partitioners work in numpy, the samplers in torch; both call this one function.

    Example:
        >>> counts_to_indptr(torch.tensor([2, 0, 3]))
        tensor([0, 2, 2, 5])
        >>> counts_to_indptr(np.array([2, 0, 3], dtype=np.int32))
        array([0, 2, 2, 5])
    """
    if isinstance(counts, np.ndarray):
        indptr_np = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr_np[1:])
        return indptr_np
    indptr = torch.zeros(counts.numel() + 1, dtype=torch.int64)
    torch.cumsum(counts, dim=0, out=indptr[1:])
    return indptr


def row_chunks(indptr: Tensor, edges: int) -> list[tuple[int, int]]:
    """``(first, last)`` row ranges of about ``edges`` edges each (a row is never split), covering every row.

    Example:
        >>> row_chunks(torch.tensor([0, 3, 4, 9, 9]), 4)  # row 2 alone holds 5 edges
        [(0, 2), (2, 3), (3, 4)]
    """
    n = indptr.numel() - 1
    marks = torch.arange(edges, max(int(indptr[-1]), edges), edges, dtype=torch.int64)
    cuts = torch.searchsorted(indptr[1:].contiguous(), marks) + 1
    bounds = sorted({0, n, *(int(c) for c in cuts if 0 < int(c) < n)})
    return list(zip(bounds[:-1], bounds[1:])) or [(0, n)]


__all__ = ["MASK_NAMES", "as_tensor", "counts_to_indptr", "row_chunks"]
