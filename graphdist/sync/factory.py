"""``make_sync(mode, model)``: the gradient sync that ``--sync`` names."""

from __future__ import annotations

import warnings
from typing import Any, Optional

from torch import nn

from graphdist.sync.base import GradientSync
from graphdist.sync.ddp import DdpSync
from graphdist.sync.layerwise import LayerwiseSync
from graphdist.sync.modes import SYNC_MODES, auto_without_probe


def make_sync(
    mode: str,
    model: nn.Module,
    group: Any = None,
    algorithm: Optional[Any] = None,
    find_unused_parameters: bool = False,
    seed_weighted: bool = True,
    compress: str = "none",
    sacp: bool = False,
    sacp_overrides: Optional[dict[str, str]] = None,
    **kwargs: Any,
) -> GradientSync:
    """The gradient sync for ``--sync mode`` over ``model``.

    Args:
        mode: a key of :data:`SYNC_MODES`.
        model: the model (``sync.model`` is what forward runs through).
        group: process group (default: the default group).
        algorithm: the allreduce algorithm (``graphdist.comm.allreduce_algorithm``); default ring.
        find_unused_parameters: ``ddp`` only (dwbp and blocking flush unused layers anyway).
        seed_weighted: each rank's loss is a mean over its own seeds (True: gradients weighted by
            seed share) or its part of one global mean (False: gradients summed).
        compress: ``--compress``: none, fp16, bf16 (a cast around the allreduce; under ``ddp`` torch's
            own wrappers), int8 (``graphdist.sync.compress``; not under ``ddp``) or auto (fp16 or
            int8, timed here: collective; fp16 under ``ddp``).
        sacp: send each Linear's gradient dense or as sufficient factors, whichever is smaller
            (``graphdist.sync.sacp``; layer-wise modes only: ``ddp`` warns and ignores it).
        sacp_overrides: layer name -> ``dense`` or ``sfb`` (debugging).
        **kwargs: passed to the sync class (``layers=``, ``hook=`` for layer-wise modes).

    Raises:
        ValueError: an unknown mode, naming the known ones.

    Example:
        >>> import torch, warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     type(make_sync("blocking", torch.nn.Linear(2, 2))).__name__
        'LayerwiseSync'
    """
    if mode not in SYNC_MODES:
        raise ValueError(f"Expected a sync mode in {tuple(SYNC_MODES)} (got {mode!r}); e.g. --sync dwbp")
    if SYNC_MODES[mode].candidates:
        raise ValueError(f"--sync {mode} is a choice among {', '.join(SYNC_MODES[mode].candidates)}, made by the "
                         "trainer at the run's start (graphdist.sync.choice); build one of them")
    choices = []
    if compress == "auto":
        compress = resolve_compression(mode, model, algorithm, group)
        choices.append(f"compress {compress} (auto)")
    if not SYNC_MODES[mode].layerwise:  # torch DDP: its own buckets, its own allreduce
        if sacp:
            warnings.warn("sacp is ignored under --sync ddp (DDP sends its own buckets); use --sync dwbp",
                          stacklevel=2)
        if kwargs.get("layers") is not None:
            warnings.warn("`layers` is ignored in ddp mode: DDP forms its own buckets", stacklevel=2)
        kwargs.pop("layers", None)
        sync: GradientSync = DdpSync(model, group=group, find_unused_parameters=find_unused_parameters,
                                     algorithm=algorithm, seed_weighted=seed_weighted, compress=compress, **kwargs)
    else:
        sync = _layerwise(mode, model, group, algorithm, find_unused_parameters, seed_weighted, compress, sacp,
                          sacp_overrides, **kwargs)
    sync.choices.extend(choices)
    return sync


def _layerwise(mode: str, model: nn.Module, group: Any, algorithm: Optional[Any], find_unused_parameters: bool,
               seed_weighted: bool, compress: str, sacp: bool, sacp_overrides: Optional[dict[str, str]],
               **kwargs: Any) -> GradientSync:
    """``make_sync`` for the layer-wise modes (dwbp, blocking): the hook (compression, SACP) and the sync."""
    if find_unused_parameters:
        warnings.warn("find_unused_parameters only matters in ddp mode; dwbp/blocking flush unused layers anyway",
                      stacklevel=3)  # make_sync's caller
    if compress != "none" or sacp:
        if "hook" in kwargs:
            raise ValueError("Expected either compress=/sacp= or hook= (a hook of your own can wrap "
                             "graphdist.sync.compress.cast_compress_wrapper itself)")
        from graphdist.sync.compress import CAST_DTYPES, DEFAULT_BLOCK, compressed_hook, wire_bytes

        hook, state = compressed_hook(compress, algorithm, group, seed_weighted=seed_weighted)
        if sacp:
            import torch

            from graphdist.sync.sacp import make_sacp

            hook, state = make_sacp(model, hook, state, seed_weighted, sacp_overrides,
                                    factor_dtype=CAST_DTYPES.get(compress, torch.float32),
                                    dense_bytes=wire_bytes(compress, getattr(state, "block", DEFAULT_BLOCK)))
        kwargs["hook"], kwargs["hook_state"] = hook, state
    return LayerwiseSync(model, mode=mode, group=group, algorithm=algorithm, seed_weighted=seed_weighted, **kwargs)


def resolve_compression(mode: str, model: nn.Module, algorithm: Optional[Any] = None, group: Any = None) -> str:
    """``--compress auto``'s choice (timed, collective: every rank, same point); under a mode that can send
    one candidate only, that one (ddp: fp16, torch's hooks have no int8)."""
    import logging

    from graphdist.sync.compress import choose_compression

    fixed = auto_without_probe(mode)
    if fixed is not None:
        return fixed
    if group is not None:
        raise ValueError("--compress auto times int8, which runs over all ranks on its own group (got a group)")
    choice = choose_compression(model, algorithm)
    logging.getLogger("graphdist").debug(choice.describe())
    return choice.chosen


__all__ = ["make_sync", "resolve_compression"]
