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

``fp16`` is the same under autocast to float16, for GPUs that multiply float16 but not bfloat16
(V100, T4): its 5 exponent bits need the loss scaled (:func:`loss_scaler`), so the gradients the
sync sends are scaled too, and divided back before the optimizer step. A CPU worker refuses it.

Example:
    >>> import torch
    >>> with autocast("fp32", torch.device("cpu")):
    ...     torch.is_autocast_enabled("cpu")
    False
"""

from __future__ import annotations

import contextlib
import os
from typing import ContextManager

import torch

from graphdist.config import PRECISIONS

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(precision: str, device: torch.device) -> None:
    """Raises ``ValueError`` when ``device`` cannot run ``precision``'s products natively.

    Example:
        >>> check_precision("fp32", torch.device("cpu"))
    """
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    if precision == "fp32":
        return
    if precision == "fp16":
        _check_fp16(device)
        return
    if device.type == "cpu":
        from graphdist.models.dense import native_bf16

        if not native_bf16():
            raise ValueError("--precision bf16: this CPU has no bfloat16 instructions (AVX512_BF16 or AMX), "
                             "so its bf16 products would be emulated, slower than float32; use --precision fp32")
    elif device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"--precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16 arithmetic; "
                         "use --precision fp16 (loss-scaled) or fp32")


def _check_fp16(device: torch.device) -> None:
    """float16 runs on CUDA (every GPU torch supports multiplies it). A CPU refuses it: only AMX-FP16
    CPUs multiply it in hardware, and graphdist's CPU products have no float16 path (bf16 is the CPU's
    reduced precision). ``GRAPHDIST_TEST_EMULATED_FP16=1`` lets a CPU run it anyway (the loss scaling's
    tests), its products in float32."""
    if device.type == "cuda" or os.environ.get("GRAPHDIST_TEST_EMULATED_FP16") == "1":
        return
    raise ValueError(f"--precision fp16 is for GPUs ({device.type} worker here): on a CPU use --precision bf16 "
                     "where it has AVX512_BF16 or AMX, else fp32")


def autocast(precision: str, device: torch.device) -> ContextManager:
    """The context a training forward (and its loss) runs in: autocast to bfloat16 for ``bf16``, to
    float16 for ``fp16``, else nothing.

    Example:
        >>> import torch
        >>> with autocast("bf16", torch.device("cpu")):
        ...     torch.get_autocast_dtype("cpu")
        torch.bfloat16
    """
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AUTOCAST_DTYPES[precision])


def loss_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """Dynamic loss scaling for ``fp16`` (torch's ``GradScaler``); a disabled one, which passes
    everything through, for the others.

    float16 keeps 5 exponent bits: small gradients underflow to zero unless the loss is scaled up
    first. The scaler multiplies the loss by ``S`` (65,536 at first), so every gradient, and what the
    sync sends, is ``S`` times the true one; ``step`` divides them back before the optimizer, and
    skips the step where one is not finite, halving ``S`` (doubling it after 2,000 clean steps).
    Every rank of a gradient-synced strategy holds the same summed gradients, so every rank skips
    and rescales alike; the scaler's state is in the checkpoint, so a resume is bit-identical.

    Example:
        >>> loss_scaler("fp32", torch.device("cpu")).is_enabled()
        False
    """
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


__all__ = ["AUTOCAST_DTYPES", "PRECISIONS", "autocast", "check_precision", "loss_scaler"]
