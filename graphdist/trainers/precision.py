"""``--precision``: the arithmetic of a training step's dense products.

``fp32`` (the default) computes everything in float32. ``bf16`` is mixed precision: the forward
runs under ``torch.autocast`` to bfloat16, so the dense products (graphdist's ``Linear``, and a
user's or PyG's ``nn.Linear``) multiply bfloat16 copies of their inputs and weights, accumulating
in float32. Parameters, their gradients (and so what the sync exchanges), the optimizer's state,
the loss, and evaluation stay float32. graphdist's own layers keep every other op (sparse
aggregation, activations, dropout) in float32 too (``graphdist.models.dense``).

bfloat16 keeps float32's exponent range, so unlike float16 it needs no loss scaling. It pays
where the hardware multiplies bfloat16 natively: CPUs with AVX512_BF16 or AMX (2.2-2.5x float32's
rate for the first layer's products of a sampled GCN batch on a Zen 4 EPYC, ``bench/bench_dense.py``)
and GPUs from NVIDIA's Ampere on. Elsewhere the products would be emulated, slower than float32,
so such a worker refuses it (:func:`check_precision`).

Example:
    >>> import torch
    >>> with autocast("fp32", torch.device("cpu")):
    ...     torch.is_autocast_enabled("cpu")
    False
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

from graphdist.config import PRECISIONS


def check_precision(precision: str, device: torch.device) -> None:
    """Raises ``ValueError`` when ``device`` cannot run ``precision``'s products natively.

    Example:
        >>> check_precision("fp32", torch.device("cpu"))
    """
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    if precision == "fp32":
        return
    if device.type == "cpu":
        from graphdist.models.dense import native_bf16

        if not native_bf16():
            raise ValueError("--precision bf16: this CPU has no bfloat16 instructions (AVX512_BF16 or AMX), "
                             "so its bf16 products would be emulated, slower than float32; use --precision fp32")
    elif device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"--precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16 arithmetic; "
                         "use --precision fp32")


def autocast(precision: str, device: torch.device) -> ContextManager:
    """The context a training forward (and its loss) runs in: autocast to bfloat16 for ``bf16``, else nothing.

    Example:
        >>> import torch
        >>> with autocast("bf16", torch.device("cpu")):
        ...     torch.get_autocast_dtype("cpu")
        torch.bfloat16
    """
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


__all__ = ["PRECISIONS", "autocast", "check_precision"]
