"""Structure-aware communication (Poseidon's SACP): each Linear's gradient goes dense or as sufficient factors.

A Linear ``y = x W^T + b`` (``W`` is ``M x N``) that saw K input rows this step has the gradient
``dW = sum_k u_k v_k^T`` (``u_k`` a row of ``dL/dy``, ``v_k`` the matching row of ``x``) and
``db = sum_k u_k``. Instead of summing ``dW`` over ranks (a ring sends ``2 (P-1)/P * M N`` floats
per rank), each rank can send its ``K_r`` rows of ``[u | v]`` to every other rank, ``(P-1) K_r (M+N)``
floats, and every rank rebuilds ``sum_r U_r^T V_r`` exactly. Poseidon's rule, per layer and step:
sufficient factors iff ``K_max (M+N) <= 2 M N / P``. That pays for wide layers fed few rows (the
upper layers of a wide GraphSAGE with small per-worker batches); full-graph layers stay dense.
A learnable embedding table (``nn.Embedding``, ``V x D``, dense gradients) goes as the ``K_r`` rows
this rank looked up and their indices, ``(P-1) K_r (D+2)`` floats' worth, iff
``K_max (D+2) <= 2 V D / P``: its bytes scale with the rows touched, not the table.

How it fits the sync (``LayerwiseSync`` decides *when*, this hook *what*):
- :class:`LinearCapture` (``graphdist.sync.sacp_capture``, with the rules and :class:`RowCounts`)
  hooks every ``torch.nn.Linear`` and ``torch_geometric.nn.Linear`` (not a subclass of torch's) of
  the model: in forward it keeps the input rows, and on the output a tensor hook keeps ``dL/dy``.
  No change to the user's model.
- Every rank must pick the same scheme (or they issue different collectives and deadlock): besides
  the seed count (sent when the step begins), every rank's rows per Linear go out in one
  all-reduce when the model's forward returns (:class:`RowCounts`); a layer that could go as
  factors waits for it, so every rank knows every ``K_r``, decides alike, and the factor exchange
  needs no padding. A layer whose rows on this rank alone rule factors out is dense on every
  rank (the rule depends on the largest ``K_r``) and goes without waiting.
- A guard checks one row of the rebuilt local gradient against autograd's (cheap: K x N); a model
  whose Linear weight gets gradient from elsewhere too (tied weights) fails with a clear error
  instead of training on a wrong gradient.

Bytes: the factors are counted from the tensors handed to the backend (``all_to_all_v``); dense
layers by their algorithm. ``state.scheme_bytes`` splits them per layer and scheme.

Example (no process group: nothing is sent, the choice is still made):
    >>> import torch
    >>> sacp_choice(k_rows=[16, 20], out_features=2048, in_features=2048)
    'sfb'
    >>> sacp_choice(k_rows=[1500, 1200], out_features=2048, in_features=2048)
    'dense'
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch import nn

from graphdist import comm
from graphdist.sync.hooks import CommHook, seed_weighted_allreduce
from graphdist.sync.modes import SACP_SCHEMES
from graphdist.sync.sacp_capture import (LinearCapture, RowCounts, group_size, is_dense_embedding, is_linear,
                                         sacp_choice, sparse_rows_choice)

logger = logging.getLogger(__name__)

SCHEMES = SACP_SCHEMES


def _rank() -> int:
    return comm.get_rank() if comm.is_initialized() else 0


@dataclass
class SacpState:
    """State of :func:`sacp_allreduce`, grouped by how often it is changed.

    Attributes:
        overrides: layer name -> ``dense`` or ``sfb``, for debugging (``--sacp-override``).
        factor_dtype: dtype the factors travel in (fp32; fp16/bf16 under ``--compress``; int8 compression
            applies to dense layers only).
        dense_bytes: bytes a value of ``dense_hook``'s payload costs on the wire
            (``graphdist.sync.compress.wire_bytes``): what the rule weighs the factors against.
        dense_hook, dense_state: what a dense layer sends (the plain or compressed allreduce); its
            state shares this state's ``weights``.
        weights: this step's seed counts and rows (:class:`RowCounts`).
        scheme_bytes: bytes this rank sent, per ``(layer, scheme)``.
        choices: the last step's scheme per layer.

    The first construction in a process group is collective (``comm.channel("sacp")``: a group and
    thread of its own, reused by later states).
    """

    # tuned often
    overrides: dict[str, str] = field(default_factory=dict)
    factor_dtype: torch.dtype = torch.float32
    dense_bytes: float = 4.0
    # tuned seldom
    dense_hook: CommHook = seed_weighted_allreduce
    dense_state: Any = None
    tag: str = "grad"
    # internal
    weights: Any = None
    scheme_bytes: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    choices: dict[str, str] = field(default_factory=dict)
    _group: Any = None
    _thread: Any = None
    _model_hook: Any = None

    def __post_init__(self) -> None:
        bad = {k: v for k, v in self.overrides.items() if v not in SCHEMES}
        if bad:
            raise ValueError(f"Expected each SACP override to be one of {SCHEMES} (got {bad})")
        if group_size() > 1:
            self._group, self._thread = comm.channel("sacp")

    @property
    def algorithm(self) -> Any:
        return getattr(self.dense_state, "algorithm", None)

    def state_dict(self) -> dict[str, Any]:
        """The dense path's state (int8's residuals) and the layers settled dense: the factors keep none."""
        inner = getattr(self.dense_state, "state_dict", None)
        state: dict[str, Any] = {"dense": inner()} if inner is not None else {}
        if self.weights is not None and self.weights.settled:
            state["settled"] = sorted(self.weights.settled)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "dense" in state:
            self.dense_state.load_state_dict(state["dense"])
        if self.weights is not None:
            self.weights.settle_layers(state.get("settled", ()))

    def close(self) -> None:
        if self._model_hook is not None:
            self._model_hook.remove()
            self._model_hook = None
        if self.weights is not None:
            self.weights.settle()
            self.weights.capture.close()

    def __repr__(self) -> str:
        return f"SacpState(dense={getattr(self.dense_hook, '__name__', self.dense_hook)}, overrides={self.overrides})"


def make_sacp(model: nn.Module, dense_hook: CommHook, dense_state: Any, seed_weighted: bool = True,
              overrides: Optional[dict[str, str]] = None, factor_dtype: torch.dtype = torch.float32,
              tag: str = "grad", dense_bytes: float = 4.0) -> tuple[CommHook, SacpState]:
    """``(sacp_allreduce, state)`` over ``model``'s Linears, dense layers sent by ``dense_hook``.

    Collective when a process group exists. Example:
        >>> hook, state = make_sacp(torch.nn.Linear(4, 4), seed_weighted_allreduce, None)
        >>> hook.__name__, len(state.weights.capture.linears)
        ('sacp_allreduce', 1)
    """
    from graphdist.sync.hooks import AllreduceState

    named = dict(model.named_modules())
    forced = [named[name] for name, scheme in (overrides or {}).items() if scheme == "sfb" and name in named]
    capture = LinearCapture(model, prune_for=group_size(), keep=forced, factor_bytes=factor_dtype.itemsize,
                            dense_bytes=dense_bytes)
    weights = RowCounts(capture, None, tag, normalize=seed_weighted)
    if dense_state is None:
        dense_state = AllreduceState(None, None, tag, weights)
    dense_state.weights = weights
    state = SacpState(dict(overrides or {}), factor_dtype=factor_dtype, dense_bytes=dense_bytes, dense_hook=dense_hook,
                      dense_state=dense_state, tag=tag, weights=weights)
    state._model_hook = model.register_forward_hook(lambda *_: weights.issue())
    return sacp_allreduce, state


def _linear_of(bucket: Any) -> Optional[nn.Module]:
    """The bucket's Linear, when the bucket holds exactly its parameters (weight, then bias if any)."""
    modules = getattr(bucket, "modules", ())
    if len(modules) != 1 or not is_linear(modules[0]):
        return None
    lin = modules[0]
    own = [lin.weight] + ([lin.bias] if getattr(lin, "bias", None) is not None else [])
    params = bucket.parameters()
    return lin if len(params) == len(own) and all(p is q for p, q in zip(params, own)) else None


def sacp_allreduce(state: SacpState, bucket):  # noqa: ANN001, ANN201 - see CommHook
    """A layer's gradient, summed over ranks densely or rebuilt from every rank's sufficient factors
    (a Linear) or touched rows (an embedding table)."""
    table = _embedding_of(bucket)
    if table is not None:
        return _sparse_rows(state, bucket, table)
    lin = _linear_of(bucket)
    if lin is None:
        return _dense(state, bucket, "dense")
    m, n = lin.weight.shape
    scheme = _scheme(state, bucket.name, lin,
                     lambda k: sacp_choice(k, m, n, group_size(), state.factor_dtype.itemsize, state.dense_bytes))
    state.choices[bucket.name] = scheme
    if scheme == "dense" or state._thread is None:
        return _dense(state, bucket, scheme if state._thread is not None else "dense")
    rows = state.weights.rows_of(lin)
    u, v = state.weights.capture.factors(lin)
    me = _rank()
    if u.shape[0] != rows[me] or v.shape[0] != rows[me]:
        raise RuntimeError(f"SACP: layer {bucket.name} saw {u.shape[0]} rows by backward but {rows[me]} when "
                           f"forward returned (a second forward in one step?); use --sacp off")
    _check_local(bucket, lin, u, v, state.weights.capture.low_precision(lin))
    scale = state.weights.scale()
    flat = bucket.buffer()
    if scale == 0.0:  # no seeds here: the local "mean" gradient may be nan; contribute nothing
        u = torch.zeros_like(u)
        flat.zero_()
    factors = torch.cat([u * scale, v], dim=1).to(state.factor_dtype).contiguous()
    host = comm.HostCopy(factors)  # a CUDA rank's copy starts here; the exchange's thread waits for it
    size = group_size()
    state.scheme_bytes[(bucket.name, "sfb")] += factors.numel() * factors.element_size() * (size - 1)

    def run() -> torch.Tensor:
        payload = host.wait()
        pending = comm.all_to_all_v_async([payload] * size, group=state._group, tag=state.tag, recv_rows=rows,
                                          duplex=True)
        # Every rank's term, this rank's own included, multiplied from the factors as sent and added
        # in rank order: ranks on the same kind of device then apply the same gradient, bit for bit.
        # (Adding the peers' terms to autograd's own gradient left the replicas apart by float32
        # rounding: 2e-7 after four steps.) A CPU and a GPU rank still round differently. The own
        # term is multiplied while the factors travel.
        own = _term(payload, m, flat)
        got = pending.wait()
        total = None
        for r, factors in enumerate(got):
            term = own if r == me else _term(factors, m, flat)
            total = term if total is None else total.add_(term)
        flat.copy_(total)
        return flat

    return comm.Handle("sufficient-factor exchange", state._thread.submit(run), state._group, result=flat).future()


def _term(factors: torch.Tensor, m: int, flat: torch.Tensor) -> torch.Tensor:
    """One rank's share of a factored layer's flat gradient: ``U^T V`` (weight), then ``U``'s column sums (bias)."""
    u_v = factors.to(flat.device, flat.dtype)
    term = torch.empty_like(flat)
    n = u_v.shape[1] - m
    torch.mm(u_v[:, :m].t(), u_v[:, m:], out=term[: m * n].view(m, n))
    if term.numel() > m * n:
        torch.sum(u_v[:, :m], 0, out=term[m * n :])
    return term


def _scheme(state: SacpState, name: str, module: nn.Module, choose: Callable[[list[int]], str]) -> str:
    """The layer's scheme this step: its override, else ``choose`` over every rank's rows. Dense without
    waiting for the other ranks' rows when this rank's alone rule the sparse scheme out (the
    largest K over ranks is at least this one's)."""
    override = state.overrides.get(name)
    if override:
        return override
    if state.weights.is_settled(module):
        return "dense"
    own = state.weights.issued_rows(module)
    if own >= 0 and choose([own]) == "dense":
        return "dense"
    return choose(state.weights.rows_of(module))


def _embedding_of(bucket: Any) -> Optional[nn.Module]:
    modules = getattr(bucket, "modules", ())
    if len(modules) != 1 or not is_dense_embedding(modules[0]):
        return None
    params = bucket.parameters()
    return modules[0] if len(params) == 1 and params[0] is modules[0].weight else None


def _sparse_rows(state: SacpState, bucket: Any, table: nn.Module):  # noqa: ANN202
    """Each rank sends its touched rows (int64 index and fp32 values, as bytes) to every peer; each
    rank adds every rank's rows into a zero gradient."""
    num_rows, dim = table.weight.shape
    scheme = _scheme(state, bucket.name, table,
                     lambda k: sparse_rows_choice(k, num_rows, dim, group_size(), state.dense_bytes))
    scheme = "dense" if scheme == "sfb" else scheme
    state.choices[bucket.name] = scheme
    if scheme == "dense" or state._thread is None:
        return _dense(state, bucket, scheme if state._thread is not None else "dense")
    rows = state.weights.rows_of(table)
    flat = bucket.buffer()
    grad = flat.view(num_rows, dim)
    index = state.weights.capture.touched(table).to(grad.device)
    if index.numel() != rows[_rank()]:
        raise RuntimeError(f"SACP: table {bucket.name} was looked up again after forward returned; use --sacp off")
    values = grad.index_select(0, index)
    outside = float(grad.abs().sum()) - float(values.abs().sum())
    if outside > 1e-5 * (float(values.abs().sum()) + 1.0):
        raise RuntimeError(f"SACP: table {bucket.name} has gradient in rows it did not look up (a tied or "
                           f"reused weight?); train with --sacp off")
    scale = state.weights.scale()
    if scale == 0.0:
        values = torch.zeros_like(values)
    packed = comm.pack_rows(index, values * scale)
    host = comm.HostCopy(packed)  # a CUDA rank's copy starts here; the exchange's thread waits for it
    size = group_size()
    state.scheme_bytes[(bucket.name, "sparse")] += packed.numel() * (size - 1)

    def run() -> torch.Tensor:
        packed_host = host.wait()
        got = torch.cat(comm.all_to_all_v([packed_host] * size, group=state._group, tag=state.tag, recv_rows=rows,
                                           duplex=True))
        every_index, every_value = comm.unpack_rows(got, dim)
        summed = torch.zeros(num_rows, dim, dtype=torch.float32).index_add_(0, every_index, every_value)
        flat.copy_(summed.view(-1))
        return flat

    return comm.Handle("sparse-row exchange", state._thread.submit(run), state._group, result=flat).future()


def _dense(state: SacpState, bucket: Any, scheme: str):  # noqa: ANN202
    buf = bucket.buffer()
    algorithm = state.algorithm
    nbytes = buf.numel() * buf.element_size()
    if algorithm is not None and group_size() > 1:
        state.scheme_bytes[(bucket.name, scheme)] += algorithm.bytes_sent(nbytes, _rank(), group_size())[0]
    return state.dense_hook(state.dense_state, bucket)


def _check_local(bucket: Any, lin: nn.Module, u: torch.Tensor, v: torch.Tensor, low_precision: bool = False) -> None:
    """One row of ``U^T V`` against autograd's local gradient: the factors must be the whole gradient.

    Within float32's sums' rounding, or bfloat16's (2**-8 per operand and result: 2**-5 of the
    largest value allowed) where the product ran under autocast; a tied weight's extra gradient is
    of the gradient's own size."""
    m, n = lin.weight.shape
    if m == 0 or u.shape[0] == 0:
        return
    row = (bucket.index() * 7919) % m  # a different row per layer; any row would do
    rebuilt = u[:, row].float() @ v.float()
    local = bucket.buffer()[row * n : (row + 1) * n].float()
    relative = 2.0 ** -5 if low_precision else 1e-3
    tolerance = relative * (float(local.abs().max()) + float(rebuilt.abs().max())) + 1e-6
    if float((rebuilt - local).abs().max()) > tolerance:
        raise RuntimeError(f"SACP: layer {bucket.name}'s weight gradient is not only its Linear's (u v^T rows): "
                           f"a tied or reused weight? Train with --sacp off")


__all__ = ["LinearCapture", "RowCounts", "SCHEMES", "SacpState", "is_dense_embedding", "is_linear", "make_sacp",
           "sacp_allreduce", "sacp_choice", "sparse_rows_choice"]
