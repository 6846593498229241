"""Dense products: :class:`Linear` and :func:`linear`, on CPU through oneDNN (float32, or bfloat16 under autocast).

Why not ``torch.nn.functional.linear``: on CPU it calls MKL's ``sgemm``, which runs its AVX2 code
on AMD processors. On the EPYC this project ran on until 2026-12-04 (AVX-512, one thread; its CPU
family was not recorded) oneDNN, which torch ships for its own CPU kernels, computed the same
float32 forward products 2-2.6x faster: 3,155 x 100 x 128, the first layer of a 512-seed GCN
batch, took 0.74 ms with MKL and 0.36 ms with oneDNN, and 2.7 ms against 1.5 ms forward +
backward (``bench/bench_dense.py``). The arithmetic stays float32 (no bf16 down-conversion; that
forward was bit-identical to MKL's there).

oneDNN builds a kernel for each shape it sees (0.07-0.28 ms each here) and keeps it, with about
10 MB of memory, in a cache of 1,024; a sampled batch has a different number of rows every step.
So only products of fewer than :data:`PAD_BELOW` rows and at least :data:`PAD_MIN_OUT` outputs
take the fast path, their rows padded with zeros to a multiple of :data:`ROW_MULTIPLE`: a run
then sees a handful of shapes. In the aggregation strategy's GCN step, padding took forward +
backward from 3.9 to 3.4 ms. Larger products, also 1.3-1.8x faster on oneDNN, stay on MKL: in
the GraphSAGE speed workload (150,000-row layers, a new shape every step) the cached kernels
took a worker's peak RSS from 1.6 to 2.9 GiB in two epochs; padding them would copy 100+ MB a
step. Narrower products (cora's 1,433 -> 16) stay on MKL too: copying their wide input to pad
it costs more than the product gains.

Where it pays: a 2x gain over MKL's AVX2 code takes AVX-512 units 512 bits wide, which AMD has
from Zen 5 (CPU family 26). On the Zen 4 EPYC of 2026-12-05 (family 25, AVX-512 run as two
256-bit halves) oneDNN only matched MKL (0.95-1.04x on the same shapes, ``bench/bench_dense.py``)
and the padding cost copies: a GCN aggregation epoch ran 2.5% faster on MKL. Intel CPUs were not
measured; MKL runs its own AVX-512 code there, so no gain is expected. So the fast path is taken
on AMD CPUs of family 26 and later only; ``GRAPHDIST_ONEDNN=1`` takes it on any AVX-512 CPU (to
measure one) and ``GRAPHDIST_ONEDNN=0`` never.

Under autocast to bfloat16 (``--precision bf16``, ``graphdist.trainers.precision``) the CPU
products of at least :data:`MIN_MACS` run in bfloat16 on oneDNN, padded whatever their rows
(the cast copies the rows anyway; unpadded, oneDNN built a kernel for each batch's row count
and the step ran slower than float32), where the CPU multiplies bfloat16 in hardware
(:func:`native_bf16`). Their results and gradients come back as float32.

The fast path is taken for those float32 CPU products of at least :data:`MIN_MACS`
multiply-adds when the CPU is one of those, torch's CPU capability is AVX-512 and oneDNN is
enabled (``torch.backends.mkldnn.enabled``; set it False to get MKL back). Anything else (CUDA,
other dtypes, other CPUs, small or large products) is ``F.linear``.

Example:
    >>> lin = Linear(4, 3)
    >>> x = torch.randn(5, 4)
    >>> torch.allclose(lin(x), x @ lin.weight.t() + lin.bias, atol=1e-6)
    True
"""

from __future__ import annotations

import functools
import os
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

# Padded row counts are multiples of this (or coarser for larger batches, see _padded_rows): a
# batch's rows vary by a few hundred from step to step, so a run sees a few shapes.
ROW_MULTIPLE = 64
# Products of this many rows or more stay on MKL: padding them would copy 100+ MB a step, and
# unpadded, every new row count leaves a ~10 MB kernel in oneDNN's cache (see the module doc).
PAD_BELOW = 16_384
# Narrower outputs stay on MKL: the copy of the input rows would outweigh the product's gain.
PAD_MIN_OUT = 32
# Smaller products stay on MKL, whose call costs less: 512 x 128 x 16 (a sampled classifier)
# took 0.135 ms forward + backward with MKL and 0.2 ms with oneDNN.
MIN_MACS = 2_000_000
# AMD's first family whose AVX-512 units are 512 bits wide (Zen 5); Zen 4's (25) are two 256-bit halves.
FULL_WIDTH_AMD_FAMILY = 26


@functools.lru_cache(maxsize=1)
def _avx512() -> bool:
    """Whether oneDNN's AVX-512 product can run here (torch built with it, an AVX-512 CPU)."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and torch.backends.cpu.get_cpu_capability().startswith("AVX512"))


@functools.lru_cache(maxsize=1)
def _onednn_pays() -> bool:
    """Whether this CPU takes the fast path: AMD family 26 (Zen 5) or later, or ``GRAPHDIST_ONEDNN`` says so."""
    forced = os.environ.get("GRAPHDIST_ONEDNN", "")
    if forced in ("0", "1"):
        return forced == "1" and _avx512()
    return _avx512() and cpu_family("AuthenticAMD") >= FULL_WIDTH_AMD_FAMILY


def cpu_family(vendor: str, cpuinfo: str = "/proc/cpuinfo") -> int:
    """The ``cpu family`` of the first processor in ``cpuinfo`` when its vendor is ``vendor``, else 0.

    Example:
        >>> cpu_family("AuthenticAMD", cpuinfo="/nonexistent")
        0
    """
    try:
        with open(cpuinfo) as f:
            fields = dict(line.split(":", 1) for line in f.read().split("\n\n", 1)[0].splitlines() if ":" in line)
    except OSError:
        return 0
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    if fields.get("vendor_id") != vendor:
        return 0
    try:
        return int(fields.get("cpu family", "0"))
    except ValueError:
        return 0


def uses_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether :func:`linear` runs ``x``'s product on oneDNN (else ``F.linear``).

    Example:
        >>> uses_onednn(torch.zeros(2, 3, dtype=torch.float64), torch.zeros(4, 3, dtype=torch.float64))
        False
    """
    return _product_dtype(x, weight) is not None


def _product_dtype(x: torch.Tensor, weight: torch.Tensor) -> Optional[torch.dtype]:
    """The dtype :func:`linear`'s padded oneDNN product computes in, or None for ``F.linear``.

    bfloat16 under CPU autocast to bfloat16 on a CPU with bfloat16 instructions, for any row count
    (autocast copies the rows to cast them anyway, so padding costs no extra pass); float32 where
    :func:`_onednn_pays` and the shape qualifies (see the module doc).
    """
    if not (x.dim() == 2 and x.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.enabled
            and x.shape[0] * weight.shape[0] * weight.shape[1] >= MIN_MACS):
        return None
    reduced = autocast_dtype(x)
    if reduced == torch.bfloat16:
        return torch.bfloat16 if x.dtype in (torch.float32, torch.bfloat16) and native_bf16() else None
    if reduced is not None:  # float16 on a CPU: float32 products, with autocast off (see linear)
        return None
    if (x.dtype == torch.float32 and x.shape[0] < PAD_BELOW and weight.shape[0] >= PAD_MIN_OUT
            and _onednn_pays()):
        return torch.float32
    return None


def autocast_dtype(x: torch.Tensor) -> Optional[torch.dtype]:
    """The reduced dtype ``x``'s device autocasts to (bfloat16 or float16: ``--precision bf16|fp16``'s
    training forward), or None where it does not.

    Example:
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     autocast_dtype(torch.zeros(1))
        torch.bfloat16
    """
    device = x.device.type
    if not torch.is_autocast_enabled(device):
        return None
    dtype = torch.get_autocast_dtype(device)
    return dtype if dtype in (torch.bfloat16, torch.float16) else None


@functools.lru_cache(maxsize=1)
def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512_BF16 or AMX), so oneDNN's bf16 products
    run at twice float32's rate instead of being emulated (slower than float32).

    Example:
        >>> native_bf16() in (True, False)
        True
    """
    cpu = getattr(torch, "cpu", None)
    checks = [getattr(cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return _avx512() and any(check is not None and check() for check in checks)


def _mm_t(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``a @ b^T (+ bias)`` on oneDNN; ``a`` and ``b`` dense or dense transposes (others are copied first)."""
    return torch.ops.mkldnn._linear_pointwise(_plain(a), _plain(b), bias, "none", [], "")


def _plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` if it is dense row-major or a dense transpose, else a contiguous copy.

    oneDNN's fast kernels read those two layouts only. A weight sliced by columns (GraphSAGE's
    ``W[:, :in]`` in inference) sent it to its reference kernel: 2.4 s against 1.1 ms for cora's
    2,708 x 1,433 x 32. Rows with a stride (the features less GCN's degree column) ran 6.0 ms
    against 1.5 ms for the copy and the product together.
    """
    if t.is_contiguous() or t.t().is_contiguous():
        return t
    return t.contiguous()


def _padded_rows(rows: int) -> int:
    """``rows`` rounded up to a multiple of :data:`ROW_MULTIPLE`, or of 1/32 of the power of two below it
    when that is coarser: at most 3% more rows above 2,048, and about ten shapes per doubling.

    Example:
        >>> _padded_rows(3155), _padded_rows(15000), _padded_rows(100)
        (3200, 15104, 128)
    """
    multiple = max(ROW_MULTIPLE, 1 << max(0, rows.bit_length() - 6))
    return -(-rows // multiple) * multiple


def _padded(x: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``x`` in ``dtype`` (default its own) with zero rows appended up to :func:`_padded_rows`, in one
    copy (``x`` itself when it has that many rows and that dtype)."""
    rows, dtype = x.shape[0], dtype or x.dtype
    if _padded_rows(rows) == rows and x.dtype == dtype:
        return x
    out = x.new_empty(_padded_rows(rows), x.shape[1], dtype=dtype)
    out[:rows] = x
    out[rows:].zero_()
    return out


def _leading_rows(y: torch.Tensor, rows: int) -> torch.Tensor:
    """``y[:rows]`` as a tensor of its own over ``y``'s memory, not a view: the caller may modify it in
    place (ReLU does), which autograd forbids on a view a custom Function returned; a copy would cost a
    pass over the output."""
    if y.shape[0] == rows:
        return y
    return y.new_empty(0).set_(y.untyped_storage(), y.storage_offset(), (rows, y.shape[1]), y.stride())


def _product(x_pad: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``x_pad @ weight^T + bias`` in ``weight``'s dtype, the product in ``x_pad``'s (bfloat16: cast
    back in the same pass that adds the bias, which stays float32)."""
    if x_pad.dtype == weight.dtype:
        return _mm_t(x_pad, weight, bias)
    y = _mm_t(x_pad, weight.to(x_pad.dtype))
    return y.to(weight.dtype) if bias is None else torch.add(y, bias)


class _InputGradient(torch.autograd.Function):
    """The product on oneDNN, parameters as constants; its backward is ``x``'s gradient alone.

    The product goes to :class:`_ParameterGradients` through ``holder`` and this node returns a
    token (one expanded scalar). Two nodes, so autograd accumulates the weight gradient (and a
    layer-wise sync's hook sends it) before the input gradient's product runs: the order
    ``graphdist.sync.reorder`` gives ``F.linear`` under ``--sync dwbp``, which a product that
    never calls ``F.linear`` would otherwise lose. ``dtype`` is the products' (forward and both
    backward); results and gradients come back in the tensors' own dtypes.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                holder: list, dtype: torch.dtype) -> torch.Tensor:
        rows = x.shape[0]
        x_pad = _padded(x, dtype)
        y = _leading_rows(_product(x_pad, weight, bias), rows)
        ctx.save_for_backward(weight.to(dtype))
        ctx.rows, ctx.holder, ctx.dtype, ctx.x_dtype = rows, holder, dtype, x.dtype
        holder.append((y, x_pad))
        return y.new_zeros(()).expand(y.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], None, None, None, None]:
        (weight,) = ctx.saved_tensors
        # The padded output gradient the parameters' node made, else this one (its shape is the token's).
        grad_pad = ctx.holder.pop() if ctx.holder else _padded(grad, ctx.dtype)
        return _mm_t(grad_pad, weight.t())[: ctx.rows].to(ctx.x_dtype), None, None, None, None


class _ParameterGradients(torch.autograd.Function):
    """Returns the product; its backward computes the weight and bias gradients first and passes
    the output gradient on to :class:`_InputGradient` through the token."""

    @staticmethod
    def forward(ctx: Any, token: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                holder: list) -> torch.Tensor:
        y, x_pad = holder.pop()
        ctx.save_for_backward(x_pad)
        ctx.rows, ctx.has_bias, ctx.holder, ctx.weight_dtype = y.shape[0], bias is not None, holder, weight.dtype
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor],
                                                        Optional[torch.Tensor], None]:
        (x_pad,) = ctx.saved_tensors
        grad_pad = _padded(grad, x_pad.dtype).contiguous()
        grad_w = None
        if ctx.needs_input_grad[1]:
            # dW^T = x^T dY (in x out) measured 15% faster than dW = dY^T x; the transpose back is small.
            # In bfloat16, aten's mm (oneDNN too) reads the transposed rows without the reorder
            # _linear_pointwise makes of them: 0.42 against 0.56 ms for 3,200 x 100 x 128.
            grad_w_t = (_mm_t(x_pad.t(), grad_pad.t()) if x_pad.dtype == ctx.weight_dtype
                        else torch.mm(x_pad.t(), grad_pad))
            grad_w = grad_w_t.t().to(ctx.weight_dtype, memory_format=torch.contiguous_format)
        grad_b = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        if ctx.needs_input_grad[0]:
            ctx.holder.append(grad_pad)
        return grad, grad_w, grad_b, None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, on oneDNN where :func:`uses_onednn` says so (see the module doc).

    Under CPU autocast to bfloat16 (``--precision bf16``) the product runs in bfloat16 where
    :func:`uses_onednn` says so and in float32 otherwise (small products gain nothing); under
    CUDA autocast it runs as autocast has it (bfloat16, or float16 for ``--precision fp16``),
    and under CPU autocast to float16 in float32 (a CPU has no float16 path here). Either way the
    result is float32, as the parameters, so the sparse and elementwise ops after it stay float32.

    Example:
        >>> w = torch.eye(2)
        >>> linear(torch.tensor([[1.0, 2.0]]), w, torch.tensor([0.5, 0.0]))
        tensor([[1.5000, 2.0000]])
    """
    dtype = _product_dtype(x, weight)
    if dtype is None:
        if autocast_dtype(x) is None:
            return F.linear(x, weight, bias)
        if x.device.type != "cpu":
            return F.linear(x, weight, bias).to(weight.dtype)
        with torch.autocast("cpu", enabled=False):
            return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        holder: list = []
        token = _InputGradient.apply(x, weight.detach(), None if bias is None else bias.detach(), holder, dtype)
        return _ParameterGradients.apply(token, weight, bias, holder)
    rows = x.shape[0]
    return _product(_padded(x, dtype), weight, bias)[:rows]


class Linear(nn.Linear):
    """``torch.nn.Linear`` whose product runs through :func:`linear` (same parameters, hooks and state dict).

    Example:
        >>> isinstance(Linear(3, 2), torch.nn.Linear), Linear(3, 2)(torch.ones(4, 3)).shape
        (True, torch.Size([4, 2]))
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:
            return super().forward(x)
        return linear(x, self.weight, self.bias)


__all__ = ["Linear", "MIN_MACS", "PAD_BELOW", "PAD_MIN_OUT", "ROW_MULTIPLE", "autocast_dtype", "linear",
           "native_bf16", "uses_onednn"]
