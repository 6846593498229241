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


def _spmm(a: torch.Tensor, x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``a @ x`` written into ``out`` (allocated when None; a column slice of a wider buffer works).

    ``torch.sparse.mm`` zero-fills a result and then copies it into another: two extra passes
    over the output (measured: 82 ms against 15 ms for the 88k x 256 backward product of the
    speed workload's second layer). ``addmm`` with ``beta=0`` and ``out=`` writes the product
    once, and ignores whatever ``out`` held (NaN included).
    """
    if out is None:
        out = x.new_empty(a.shape[0], x.shape[1])
    if a._nnz() == 0 or x.shape[0] == 0:
        return out.zero_()
    # On CPU a row-strided ``x`` (the features less GCN's degree column, ``x[:, :-1]``) is read
    # in place: copying it first cost 2.1 ms against the product's 0.26 ms (15k x 100 rows).
    if not (x.device.type == "cpu" and x.stride(-1) == 1):
        x = x.contiguous()
    return torch.addmm(out, a, x, beta=0.0, out=out)


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
        if x.device.type == "cpu":
            _spmm(a, x, out=out[:, feat:])  # straight into the column slice (measured on CPU only)
        else:
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
    """In-place ``dropout(relu(h))`` in float-only passes, saving the output for the backward.

    On one CPU thread, torch's kernels that read or write ``bool`` tensors are several times
    slower than float ones (a bool-to-float multiply of the 90k x 256 first-layer output took
    ~50 ms for the conversion alone, twice a step). So p = 0.5 multiplies by a float mask of
    0.0 and 2.0 made from one random bit per element (:func:`_half_mask`), and any other p is a
    float comparison: :func:`_uniform_1_2` turns random words into floats in ``[1, 2)``, and
    ``threshold_backward(h, r, t)`` (``h`` where ``r > t``, else 0) drops in place. The
    backward reads the saved output: it is nonzero exactly where ReLU passed and the element
    was kept, so one ``threshold_backward`` applies both masks. p is exact for multiples of
    1/256, else rounded to a multiple of 2**-23, and the scale uses the rounded value: the
    expectation stays exact. Measured in the speed workload: 1,541 -> 1,880 seeds/s.
    """

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        h.relu_()
        scale = _drop_(h, p) if training and p > 0.0 else 1.0
        ctx.mark_dirty(h)
        ctx.save_for_backward(h)
        ctx.scale = scale
        return h

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (out,) = ctx.saved_tensors
        grad_in = torch.ops.aten.threshold_backward(grad, out, 0)
        if ctx.scale != 1.0:
            grad_in.mul_(ctx.scale)
        return grad_in, None, None


# Random floats in [1, 2): ``1 + k / 2**bits`` with ``k`` uniform on ``bits`` random bits, placed
# at the top of the mantissa under the exponent of 1.0 (whose bit pattern is 0x3F800000).
_ONE_BITS = 0x3F800000
_MANTISSA_BITS = 23
_SHORT_BITS = (1, 2, 4, 8)  # chunk widths that tile an int32 word


def _drop_bits(p: float) -> tuple[int, int]:
    """``(bits, drop)``: the fewest random bits per element that express ``p`` exactly as ``drop / 2**bits``
    (0.5 needs one), else 23 bits with ``p`` rounded to a multiple of 2**-23.

    Example:
        >>> _drop_bits(0.5), _drop_bits(0.25), _drop_bits(0.1)
        ((1, 1), (2, 1), (23, 838861))
    """
    for bits in _SHORT_BITS:
        if float(p * (1 << bits)).is_integer():
            return bits, int(p * (1 << bits))
    return _MANTISSA_BITS, int(round(p * (1 << _MANTISSA_BITS)))


def _uniform_1_2(numel: int, bits: int, device: torch.device) -> torch.Tensor:
    """``numel`` floats ``1 + k / 2**bits``, ``k`` uniform on ``[0, 2**bits)``, from torch's generator.

    23 bits: one int64 draw makes two values (each int32 half keeps its low 23 bits). Fewer
    bits: one int32 word makes ``32 / bits`` values, its chunks spread by a broadcast shift,
    so a one-bit mask (p = 0.5) costs 1/32 of the draws.
    """
    if bits == _MANTISSA_BITS:
        words = torch.empty((numel + 1) // 2, dtype=torch.int64, device=device).random_()
        out = words.view(torch.int32)[:numel]
        return out.bitwise_and_((1 << bits) - 1).bitwise_or_(_ONE_BITS).view(torch.float32)
    per_word = 32 // bits
    # from=int64 min with no upper bound draws all 64 bits (random_() leaves the top bit 0).
    words = torch.empty((numel + 2 * per_word - 1) // (2 * per_word), dtype=torch.int64, device=device)
    words.random_(-(1 << 63), None)
    shifts = torch.arange(0, 32, bits, dtype=torch.int32, device=device)
    chunks = words.view(torch.int32).view(-1, 1).bitwise_right_shift(shifts).view(-1)[:numel]
    chunks.bitwise_and_((1 << bits) - 1).bitwise_left_shift_(_MANTISSA_BITS - bits).bitwise_or_(_ONE_BITS)
    return chunks.view(torch.float32)


def _half_mask(numel: int, device: torch.device) -> torch.Tensor:
    """``numel`` floats, each 0.0 or 2.0 with probability 1/2: dropout's mask and scale for p = 0.5 at once.

    Bit ``j`` of a random int32 word, shifted left by ``30 - j`` and masked to bit 30, is the
    bit pattern of 2.0 or of 0.0; a word makes 31 values (bit 31 would need a right shift).
    """
    words = torch.empty((numel + 61) // 62, dtype=torch.int64, device=device).random_(-(1 << 63), None)
    shifts = torch.arange(30, -1, -1, dtype=torch.int32, device=device)
    mask = words.view(torch.int32).view(-1, 1).bitwise_left_shift(shifts).view(-1)[:numel]
    return mask.bitwise_and_(1 << 30).view(torch.float32)


def _drop_(h: torch.Tensor, p: float) -> float:
    """Zeroes each element of ``h`` with probability ``p`` (exact for multiples of 1/256, else rounded to
    2**-23) and scales the rest by the inverse keep fraction, which it returns."""
    if p == 0.5:  # the usual rate: one multiply by a {0, 2} mask drops and scales
        h.mul_(_half_mask(h.numel(), h.device).view(h.shape))
        return 2.0
    bits, drop = _drop_bits(p)
    if drop == 0:
        return 1.0
    keep_fraction = ((1 << bits) - drop) / (1 << bits)
    if keep_fraction <= 0.0:
        h.zero_()
        return 0.0
    r = _uniform_1_2(h.numel(), bits, h.device).view(h.shape)
    # Kept iff k >= drop, i.e. r > 1 + (drop - 1) / 2**bits (exact in float32).
    threshold = 1.0 + (drop - 1) / (1 << bits)
    torch.ops.aten.threshold_backward.grad_input(h, r, threshold, grad_input=h)
    scale = 1.0 / keep_fraction
    h.mul_(scale)
    return scale


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


def _relation_rows(block: Any, num_relations: int) -> Any:
    """A block whose destination rows are ``(destination, relation)`` pairs plus one self row each.

    Row ``d * (R + 1) + r`` holds destination ``d``'s edges of relation ``r``; row ``d * (R + 1) + R``
    one edge from ``d`` itself. A mean over it is every relation's mean and the node's own row side by
    side, so a typed layer transforms all of them in one GEMM. Built by moving each edge ``d`` places
    on (``d`` self rows come before it), which needs the block's edges grouped by destination, then
    relation (what graphdist's samplers and typed CSR give); other blocks are sorted first. Cached.
    """

    def build() -> Any:
        from types import SimpleNamespace

        rows, width = int(block.num_dst), num_relations + 1
        src, edge_type, indptr = block.src, block.edge_type.to(torch.int64), block_indptr(block)
        dst = torch.repeat_interleave(torch.arange(rows, device=src.device), indptr.diff(), output_size=src.numel())
        key = dst * width + edge_type
        if key.numel() > 1 and not bool((key[1:] >= key[:-1]).all()):
            order = torch.argsort(key, stable=True)
            src, dst, key = src[order], dst[order], key[order]
        counts = torch.bincount(key, minlength=rows * width)
        counts[num_relations::width] = 1
        new_indptr = torch.zeros(rows * width + 1, dtype=torch.int64, device=src.device)
        new_indptr[1:] = counts.cumsum(0)
        new_src = torch.empty(src.numel() + rows, dtype=src.dtype, device=src.device)
        new_src[torch.arange(src.numel(), device=src.device) + dst] = src
        own = torch.arange(rows, device=src.device)
        new_src[indptr[1:] + own] = own
        return SimpleNamespace(src=new_src, num_src=int(block.num_src), num_dst=rows * width, indptr=new_indptr)

    return _cache(block, f"relations:{num_relations}", build)


def relation_means(x: torch.Tensor, block: Any, num_relations: int) -> torch.Tensor:
    """``[num_dst, (R + 1) * F]``: per destination, the mean of its neighbours by each relation, then its own row.

    A relation with no edges into a destination gives zeros. Differentiable in ``x`` (a transposed CSR
    backward, as :func:`aggregate`); no ``E x F`` tensor is ever made.

    Example:
        >>> from types import SimpleNamespace
        >>> block = SimpleNamespace(src=torch.tensor([1, 2, 2]), num_src=3, num_dst=1, indptr=torch.tensor([0, 3]),
        ...                         edge_type=torch.tensor([0, 0, 1]))  # two relations into destination 0
        >>> relation_means(torch.tensor([[1.0], [2.0], [4.0]]), block, 2)
        tensor([[3., 4., 1.]])
    """
    rows = _relation_rows(block, num_relations)
    return aggregate(x, rows, MEAN).view(int(block.num_dst), (num_relations + 1) * x.shape[1])


def _column_split(block: Any, num_inner: int, kind: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``A`` cut at column ``num_inner``: ``(A[:, :num_inner], A[:, num_inner:])`` as CSR, cached on the block.

    Built from the block's edges (``dst``, ``src``, in CSR order) and ``A``'s values, without ``A``
    itself: the values stay those of the whole ``A`` (a mean still divides by every neighbour)."""

    def build() -> tuple[torch.Tensor, torch.Tensor]:
        values = _edge_values(block, kind, dtype)
        rows, src, dst = int(block.num_dst), block.src, block.dst
        inner = src < num_inner
        out = []
        for keep, offset, width in ((inner, 0, num_inner), (~inner, num_inner, int(block.num_src) - num_inner)):
            indptr = torch.zeros(rows + 1, dtype=torch.int64, device=src.device)
            indptr[1:] = torch.bincount(dst[keep], minlength=rows).cumsum(0)
            out.append(_csr(indptr, src[keep] - offset, values[keep], (rows, width)))
        return out[0], out[1]

    return _cache(block, f"split:{num_inner}:{kind}:{dtype}", build)


def aggregate_with_halo(x_inner: torch.Tensor, halo: Callable[[], torch.Tensor], block: Any,
                        kind: str = MEAN) -> torch.Tensor:
    """``aggregate(cat([x_inner, halo()]), block, kind)`` without the concatenation, and with the
    inner columns aggregated before ``halo()`` is called: while the halo rows are in flight.

    For layer-at-a-time inference over a partition (no autograd): ``block``'s first ``len(x_inner)``
    source columns are the inner nodes, the rest the halo.

    Example:
        >>> from types import SimpleNamespace
        >>> block = SimpleNamespace(src=torch.tensor([1, 2]), dst=torch.tensor([0, 0]), num_src=3, num_dst=1,
        ...                         indptr=torch.tensor([0, 2]))  # node 2 is a halo node
        >>> x = torch.tensor([[1.0], [2.0], [4.0]])
        >>> aggregate_with_halo(x[:2], lambda: x[2:], block)
        tensor([[3.]])
    """
    if int(block.num_src) == int(x_inner.shape[0]):  # no halo: nothing to cut
        out = _spmm(block_matrices(block, kind, x_inner.dtype)[0], x_inner)
        halo()
        return out
    a_inner, a_halo = _column_split(block, int(x_inner.shape[0]), kind, x_inner.dtype)
    out = _spmm(a_inner, x_inner)
    x_halo = halo()
    if a_halo._nnz() and x_halo.shape[0]:
        torch.addmm(out, a_halo, x_halo.contiguous(), out=out)
    return out


def relu_dropout_(h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``dropout(relu(h), p)`` in place on ``h`` (an intermediate nobody else saved).

    Example:
        >>> relu_dropout_(torch.tensor([-1.0, 2.0]), 0.0, False)
        tensor([0., 2.])
    """
    if not h.requires_grad:
        h.relu_()
        if training and p > 0.0:
            _drop_(h, p)
        return h
    return _ReluDropout.apply(h, p, training)
