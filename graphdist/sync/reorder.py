"""Weight gradients first: a Linear's backward computes its weight gradient before its input gradient.

Autograd runs a Linear's backward as one node that computes the input gradient and the weight
gradient together, and only then accumulates the weight gradient, which is when a layer-wise
sync's hook can send it. For the layers below the top, the input gradient is a GEMM as large
as the weight gradient's (``[rows, out] x [out, in]``), so the layer's collective starts one
GEMM later than it could. Here a Linear's forward builds two autograd nodes instead of one: the
one that receives the output gradient computes the weight (and bias) gradient and passes the
output gradient on; the second computes the input gradient. Autograd accumulates a parameter's
gradient as soon as it is produced (its accumulation nodes run before any other ready node),
so the layer's hook fires, and its collective leaves, while the input gradient is computed:
the collective gets that GEMM's time to hide in (Poseidon's wait-free backprop sends a layer's
parameters as soon as they are computed). Same operations, same values: the gradients are the
ones ``F.linear``'s backward computes (a test checks them bit for bit).

:class:`WeightFirst` installs this on every ``torch.nn.Linear`` and PyG ``Linear`` of a model
with a forward pre-hook and a forward hook that scope a ``TorchFunctionMode`` to the Linear's
own forward: only its ``F.linear`` call is rerouted, nothing else in the model pays for it, and
the model's code is untouched. ``LayerwiseSync`` installs it under ``--sync dwbp`` across ranks;
``close()`` removes it.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    >>> order = []
    >>> _ = net[2].weight.register_post_accumulate_grad_hook(lambda p: order.append("weight 2"))
    >>> _ = net[0].weight.register_post_accumulate_grad_hook(lambda p: order.append("weight 0"))
    >>> reorder = WeightFirst(net)
    >>> net(torch.ones(5, 3)).sum().backward(); reorder.close()
    >>> order, type(net[2](torch.ones(1, 4)).grad_fn).__name__   # removed: F.linear's own node again
    (['weight 2', 'weight 0'], 'AddmmBackward0')
"""

from __future__ import annotations

import threading
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.overrides import TorchFunctionMode

__all__ = ["WeightFirst", "weight_first_linear"]


class _InputGradient(torch.autograd.Function):
    """``F.linear`` with the parameters as constants; its backward is the input gradient alone.

    Its output is a *token* shaped like ``y`` (one scalar, expanded: no memory of its own): the
    product itself goes to :class:`_ParameterGradients` through ``holder``, which returns it,
    so ``y`` is a fresh output of that node (a model may modify it in place) and is never copied.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                holder: list) -> torch.Tensor:
        ctx.save_for_backward(weight)
        y = F.linear(x, weight, bias)
        holder.append(y)
        return y.new_zeros(()).expand(y.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], None, None, None]:
        (weight,) = ctx.saved_tensors
        return grad.matmul(weight), None, None, None


class _ParameterGradients(torch.autograd.Function):
    """Returns the product; its backward is the weight and bias gradients, computed first, and the
    output gradient passed on unchanged (through the token) to the input gradient's node."""

    @staticmethod
    def forward(ctx: Any, token: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                bias: Optional[torch.Tensor], holder: list) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.has_bias = bias is not None
        return holder.pop()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, Optional[torch.Tensor],
                                                        Optional[torch.Tensor], None]:
        (x,) = ctx.saved_tensors
        # g^T x: the product F.linear's own backward forms for its weight (so the values match bit for bit).
        weight_grad = grad.t().mm(x) if ctx.needs_input_grad[2] else None
        bias_grad = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[3] else None
        return grad, None, weight_grad, bias_grad, None


def weight_first_linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` whose backward produces the parameters' gradients before ``x``'s.

    Example:
        >>> x, w = torch.ones(2, 3, requires_grad=True), torch.ones(4, 3, requires_grad=True)
        >>> weight_first_linear(x, w).sum().backward()
        >>> w.grad[0].tolist(), x.grad[0].tolist()
        ([2.0, 2.0, 2.0], [4.0, 4.0, 4.0])
    """
    # On 2-D rows, as F.linear folds its leading dimensions: the product is then never a view,
    # which a custom Function may not return (an in-place op on it would bypass its backward).
    rows = x.reshape(-1, x.shape[-1]) if x.dim() != 2 else x
    holder: list = []
    token = _InputGradient.apply(rows, weight.detach(), None if bias is None else bias.detach(), holder)
    y = _ParameterGradients.apply(token, rows.detach(), weight, bias, holder)
    return y if x.dim() == 2 else y.view(*x.shape[:-1], y.shape[-1])


def _plain_linear_args(args: tuple, kwargs: dict) -> Optional[tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]]:
    """``(x, weight, bias)`` of an ``F.linear`` call that is the dense, same-dtype product
    :func:`weight_first_linear` rebuilds; None for any other call."""
    x = args[0] if args else kwargs.get("input")
    weight = args[1] if len(args) > 1 else kwargs.get("weight")
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    tensors = [t for t in (x, weight, bias) if t is not None]
    plain = (len(tensors) >= 2 and all(isinstance(t, torch.Tensor) and t.layout == torch.strided for t in tensors)
             and len({t.dtype for t in tensors}) == 1 and x.dim() >= 1)
    return (x, weight, bias) if plain else None


class _Reroute(TorchFunctionMode):
    """Inside one Linear's forward: its ``F.linear`` becomes :func:`weight_first_linear`."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        plain = _plain_linear_args(args, kwargs) if func is F.linear else None
        return weight_first_linear(*plain) if plain is not None else func(*args, **kwargs)


class WeightFirst:
    """Reroutes the backward of every Linear in ``model`` so its parameter gradients come first.

    Args:
        model: the model (its ``torch.nn.Linear`` and PyG ``Linear`` modules are rerouted).

    Only training calls are rerouted: under ``no_grad`` (evaluation) or autocast (whose casts
    the rebuilt backward would not mirror) a Linear runs ``F.linear`` itself, as do sparse or
    mixed-dtype calls. Call :meth:`close` to restore ``F.linear``'s own backward everywhere.
    """

    def __init__(self, model: nn.Module) -> None:
        from graphdist.sync.sacp import is_linear

        self._local = threading.local()  # per thread: module id -> the mode its forward entered
        self._handles = []
        for m in filter(is_linear, model.modules()):
            self._handles.append(m.register_forward_pre_hook(self._enter))
            self._handles.append(m.register_forward_hook(self._exit, always_call=True))

    def __getstate__(self) -> dict[str, Any]:
        # A deep copy (or pickle) of a model carries its hooks, and with them this object: the
        # copy reroutes its own Linears too (same values), with its own per-thread state and
        # no handles of ours to remove.
        state = dict(self.__dict__)
        del state["_local"]
        state["_handles"] = []
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def _entered(self) -> dict[int, _Reroute]:
        entered = getattr(self._local, "modes", None)
        if entered is None:
            entered = self._local.modes = {}
        return entered

    def _enter(self, module: nn.Module, _args: Any) -> None:
        if not torch.is_grad_enabled() or torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"):
            return
        mode = _Reroute()
        mode.__enter__()
        self._entered()[id(module)] = mode

    def _exit(self, module: nn.Module, _args: Any, _output: Any) -> None:
        mode = self._entered().pop(id(module), None)
        if mode is not None:
            mode.__exit__(None, None, None)

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
