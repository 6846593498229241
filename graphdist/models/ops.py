"""Sparse block operators with cheap backward passes, and a fast CPU dropout.

A block (``graphdist.sampling.base.Block`` or anything with the same attributes)
is read by duck typing: ``src``, ``dst``, ``num_src``, ``num_dst``, ``indptr``
(CSR over the destination rows, edges sorted by destination) and optionally
``edge_weight``. Models never import ``sampling``.

Why custom autograd functions: the aggregation ``A @ x`` over a block has an
exact backward ``A^T @ grad``; building ``A^T`` once per block (cached on the
block) and running a CSR matmul is several times cheaper than autograd's
generic sparse backward or an ``index_add`` over a gathered ``E x F`` tensor.
On one CPU thread the sampled first layer dominates a batch, so these paths
decide the throughput.

Example:
    >>> import torch
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class B:
    ...     src: torch.Tensor; dst: torch.Tensor; num_src: int; num_dst: int; indptr: torch.Tensor
    >>> b = B(torch.tensor([1, 2]), torch.tensor([0, 0]), 3, 1, torch.tensor([0, 2]))
    >>> self_and_mean(torch.tensor([[1.0], [2.0], [4.0]]), b)
    tensor([[1., 3.]])
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import torch

# Values of a CSR matrix: one of these kinds, cached per block under its key.
MEAN, SUM = "mean", "sum"


# ------------------------------------------------------------- block access


def block_indptr(block: Any) -> torch.Tensor:
    """The block's CSR row pointer over destination rows (built from ``dst`` if absent)."""
    indptr = getattr(block, "indptr", None)
    if indptr is not None:
        return indptr
    counts = torch.bincount(block.dst, minlength=int(block.num_dst))
    out = torch.zeros(int(block.num_dst) + 1, dtype=torch.int64, device=block.dst.device)
    out[1:] = counts.cumsum(0)
    return out


def in_degree(block: Any) -> torch.Tensor:
    """Number of block edges into each destination row (float, ``num_dst``)."""
    indptr = block_indptr(block)
    return (indptr[1:] - indptr[:-1]).to(torch.float32)


def _cache(block: Any, key: str, build: Callable[[], Any]) -> Any:
    """``build()``, memoised on the block: a block is used by forward and backward (and by
    several models in tests); a block type with ``__slots__`` simply gets no cache."""
    store = getattr(block, "_graphdist_cache", None)
    if store is None:
        store = {}
        try:
            object.__setattr__(block, "_graphdist_cache", store)
        except (AttributeError, TypeError):
            return build()
    if key not in store:
        store[key] = build()
    return store[key]


def _csr(indptr: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    # Invariant checks cost a pass over the indices; the sampler already guarantees them.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(indptr, cols, values, shape, check_invariants=False)


def _edge_values(block: Any, kind: str, dtype: torch.dtype) -> torch.Tensor:
    indptr = block_indptr(block)
    if kind == "weighted":
        return block.edge_weight.to(dtype)
    if kind == SUM:
        return torch.ones(block.src.numel(), dtype=dtype, device=block.src.device)
    deg = (indptr[1:] - indptr[:-1]).clamp_min(1).to(dtype)
    return torch.repeat_interleave(1.0 / deg, indptr[1:] - indptr[:-1], output_size=block.src.numel())


def block_matrices(block: Any, kind: str, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, Callable[[], torch.Tensor]]:
    """``A`` (num_dst x num_src CSR) and a thunk for ``A^T`` (num_src x num_dst CSR), cached.

    Args:
        block: a block (duck-typed).
        kind: ``"mean"`` (values ``1/deg``), ``"sum"`` (ones) or ``"weighted"`` (``block.edge_weight``).
        dtype: value dtype (the features' dtype).

    Returns:
        ``(A, transpose)``; ``transpose()`` builds ``A^T`` on first use only, since a first
        layer whose input needs no gradient never asks for it.
    """
    key = f"{kind}:{dtype}"

    def build_a() -> torch.Tensor:
        shape = (int(block.num_dst), int(block.num_src))
        return _csr(block_indptr(block), block.src, _edge_values(block, kind, dtype), shape)

    def build_t() -> torch.Tensor:
        # Stable sort by source keeps each row's columns ascending (better locality).
        src = block.src
        values = _edge_values(block, kind, dtype)
        dst = torch.repeat_interleave(
            torch.arange(int(block.num_dst), device=src.device), block_indptr(block).diff(), output_size=src.numel()
        )
        perm = torch.argsort(src, stable=True)
        crow = torch.zeros(int(block.num_src) + 1, dtype=torch.int64, device=src.device)
        crow[1:] = torch.bincount(src, minlength=int(block.num_src)).cumsum(0)
        return _csr(crow, dst[perm], values[perm], (int(block.num_src), int(block.num_dst)))

    a = _cache(block, "A:" + key, build_a)
    return a, lambda: _cache(block, "AT:" + key, build_t)


def _spmm(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    if a._nnz() == 0 or x.shape[0] == 0:
        return x.new_zeros(a.shape[0], x.shape[1])
    return torch.sparse.mm(a, x.contiguous())


# ------------------------------------------------------------- autograd ops


class _SpMM(torch.autograd.Function):
    """``A @ x`` with backward ``A^T @ grad`` (A fixed: no gradient for edge values)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, a: torch.Tensor, transpose: Callable[[], torch.Tensor]) -> torch.Tensor:
        ctx.transpose = transpose
        return _spmm(a, x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        return _spmm(ctx.transpose(), grad), None, None


class _SelfAndAgg(torch.autograd.Function):
    """``cat([x[:num_dst], A @ x], 1)`` in one output buffer, with one gradient buffer back.

    Fusing the concatenation lets a layer apply ``[W_self | W_neigh]`` as ONE GEMM, and the
    backward writes the self part into the sparse product's output instead of autograd
    allocating a zero ``num_src x F`` tensor for the slice and adding it.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, a: torch.Tensor, transpose: Callable[[], torch.Tensor]) -> torch.Tensor:
        num_dst, feat = a.shape[0], x.shape[1]
        out = torch.empty(num_dst, 2 * feat, dtype=x.dtype, device=x.device)
        out[:, :feat] = x[:num_dst]
        out[:, feat:] = _spmm(a, x)
        ctx.transpose, ctx.feat, ctx.num_dst = transpose, feat, num_dst
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        feat, num_dst = ctx.feat, ctx.num_dst
        grad_x = _spmm(ctx.transpose(), grad[:, feat:])
        grad_x[:num_dst] += grad[:, :feat]
        return grad_x, None, None


class _ReluDropout(torch.autograd.Function):
    """In-place ``dropout(relu(h))`` that saves one boolean mask (not a float noise tensor).

    torch's CPU dropout draws one float per element with ``bernoulli_`` (~0.45 s for the
    150k x 256 first-layer output on one thread here); 16 random bits per element cut
    from int64 draws take ~40 ms. The keep probability is rounded to a multiple of
    2**-15 and the scale uses the rounded value, so the expectation stays exact.
    """

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        h.relu_()
        scale = 1.0
        if training and p > 0.0:
            keep, scale = _keep_mask(h.shape, p, h.device)
            h.mul_(keep)
            if scale != 1.0:
                h.mul_(scale)
        ctx.mark_dirty(h)
        # After relu and the drop mask, h > 0 exactly where the gradient passes.
        ctx.save_for_backward(h > 0)
        ctx.scale = scale
        return h

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (mask,) = ctx.saved_tensors
        out = grad * mask
        if ctx.scale != 1.0:
            out.mul_(ctx.scale)
        return out, None, None


def _keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    numel = 1
    for s in shape:
        numel *= int(s)
    words = torch.empty((numel + 3) // 4, dtype=torch.int64, device=device).random_()
    # random_() fills int64 with [0, 2**63): the top bit of every 4th 16-bit chunk is
    # always 0, so keep 15 bits of each chunk.
    bits = words.view(torch.int16)[:numel].bitwise_and(0x7FFF)
    drop = int(round(p * 32768))
    keep = (bits >= drop).view(shape)
    kept_fraction = (32768 - drop) / 32768
    return keep, (1.0 / kept_fraction if kept_fraction > 0 else 0.0)


# ------------------------------------------------------------- public ops


def aggregate(x: torch.Tensor, block: Any, kind: str = MEAN) -> torch.Tensor:
    """Aggregates source features into destination rows: ``A @ x`` (``num_dst x F``).

    Args:
        x: source features, ``num_src x F``.
        block: a block (duck-typed).
        kind: ``"mean"``, ``"sum"`` or ``"weighted"`` (``block.edge_weight``).

    Returns:
        The aggregated features; differentiable in ``x``.

    Example:
        >>> from types import SimpleNamespace
        >>> block = SimpleNamespace(src=torch.tensor([1, 2]), dst=torch.tensor([0, 0]), num_src=3, num_dst=1,
        ...                         indptr=torch.tensor([0, 2]))  # sources 1 and 2 -> destination 0
        >>> x = torch.tensor([[1.0], [2.0], [4.0]])
        >>> aggregate(x, block, "mean"), aggregate(x, block, "sum")
        (tensor([[3.]]), tensor([[6.]]))
    """
    a, transpose = block_matrices(block, kind, x.dtype)
    return _SpMM.apply(x, a, transpose)


def self_and_mean(x: torch.Tensor, block: Any, kind: str = MEAN) -> torch.Tensor:
    """``cat([x[:num_dst], aggregate(x, block, kind)], 1)`` with a fused backward.

    Example:
        >>> from types import SimpleNamespace
        >>> block = SimpleNamespace(src=torch.tensor([1, 2]), dst=torch.tensor([0, 0]), num_src=3, num_dst=1,
        ...                         indptr=torch.tensor([0, 2]))
        >>> z = self_and_mean(torch.tensor([[1.0], [2.0], [4.0]]), block)
        >>> W = torch.tensor([[1.0, 10.0]])  # [W_self | W_neigh] for one output feature
        >>> z, z @ W.t()  # one GEMM for self + neighbours
        (tensor([[1., 3.]]), tensor([[31.]]))
    """
    a, transpose = block_matrices(block, kind, x.dtype)
    return _SelfAndAgg.apply(x, a, transpose)


def relu_dropout_(h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``dropout(relu(h), p)`` in place on ``h`` (an intermediate nobody else saved).

    Example:
        >>> relu_dropout_(torch.tensor([-1.0, 2.0]), 0.0, False)
        tensor([0., 2.])
    """
    if not h.requires_grad:
        h.relu_()
        if training and p > 0.0:
            keep, scale = _keep_mask(h.shape, p, h.device)
            h.mul_(keep).mul_(scale)
        return h
    return _ReluDropout.apply(h, p, training)
