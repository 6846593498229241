"""torch ``DistributedDataParallel`` over a graphdist group, with a communication hook.

What the hook sends (a seed-weighted allreduce, a compressed one...) is sync policy and lives
in ``graphdist.sync.hooks``; this module only builds the wrapper, since it is a
``torch.distributed`` object.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from graphdist.comm.collectives import Group, _run


def ddp_wrap(
    module: torch.nn.Module,
    group: Group = None,
    find_unused_parameters: bool = False,
    comm_hook: Optional[Callable[..., Any]] = None,
    hook_state: Any = None,
    ignore: Sequence[str] = (),
    **kwargs: Any,
) -> torch.nn.Module:
    """Wraps ``module`` in torch ``DistributedDataParallel`` over ``group`` (CPU or one device).

    DDP averages gradients over ranks (sum / world size) during backward unless a
    communication hook replaces that. DDP also broadcasts rank 0's parameters and buffers
    at construction. Must be called by every rank.

    Args:
        module: the model; its parameters must live on one device (or the CPU).
        group: process group (default: the default group).
        find_unused_parameters: set when some parameters may get no gradient in a
            step (DDP errors in the next step otherwise); costs a graph traversal.
        comm_hook: a hook ``hook(state, bucket) -> Future[Tensor]`` registered with
            ``register_comm_hook`` (e.g. ``graphdist.sync.hooks.seed_weighted_allreduce``).
        hook_state: the hook's state object.
        ignore: names of parameters DDP leaves alone (neither broadcast nor reduced; the caller syncs them).
        **kwargs: passed to ``DistributedDataParallel`` (e.g. ``bucket_cap_mb``).

    Returns:
        The wrapped module; ``.module`` is the original.

    Raises:
        CommError: if DDP's initial parameter broadcast fails.

    Example:
        >>> import torch, warnings
        >>> from graphdist.testing import one_rank_group
        >>> with one_rank_group():
        ...     ddp = ddp_wrap(torch.nn.Linear(2, 1))
        ...     ddp(torch.ones(3, 2)).sum().backward()
        >>> type(ddp).__name__, ddp.module.weight.grad.shape
        ('DistributedDataParallel', torch.Size([1, 2]))
    """
    from torch.nn.parallel import DistributedDataParallel

    if ignore:  # torch's documented way to keep parameters out of DDP's buckets (pytorch issue 43690)
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, list(ignore))
    device_ids = None
    devices = {p.device for p in module.parameters()}
    if len(devices) == 1:
        device = next(iter(devices))
        device_ids = [device] if device.type == "cuda" else None
    ddp = _run(
        "ddp_wrap",
        group,
        lambda: DistributedDataParallel(
            module,
            device_ids=device_ids,
            process_group=group,
            find_unused_parameters=find_unused_parameters,
            **kwargs,
        ),
    )
    if comm_hook is not None:
        ddp.register_comm_hook(state=hook_state, hook=comm_hook)
    return ddp


def ddp_unwrap(module: torch.nn.Module) -> torch.nn.Module:
    """The module a :func:`ddp_wrap` wrapper holds (``module`` itself when it is no wrapper).

    Dropping every reference to the wrapper drops its reducer and the autograd hooks it put on the
    parameters (the caller collects the cycles it sits in), so the module can train under another sync.

    Example:
        >>> lin = torch.nn.Linear(2, 2)
        >>> ddp_unwrap(lin) is lin
        True
    """
    from torch.nn.parallel import DistributedDataParallel

    return module.module if isinstance(module, DistributedDataParallel) else module


def torch_compress_wrapper(wrapper: str, hook: Callable[..., Any]) -> Callable[..., Any]:
    """torch's DDP hook wrapper named ``wrapper`` (``fp16_compress_wrapper``, ``bf16_compress_wrapper``: what
    ``graphdist.sync.modes.COMPRESSIONS`` declares as each compression's ``ddp_wrapper``) around ``hook``.

    Example:
        >>> torch_compress_wrapper("fp16_compress_wrapper", lambda state, bucket: None).__name__
        'fp16_compress_wrapper_hook'
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if not wrapper.endswith("_compress_wrapper") or not hasattr(default_hooks, wrapper):
        raise ValueError(f"Expected a compress wrapper of torch's default DDP hooks, e.g. fp16_compress_wrapper "
                         f"(got {wrapper!r})")
    return getattr(default_hooks, wrapper)(hook)


__all__ = ["ddp_unwrap", "ddp_wrap", "torch_compress_wrapper"]
