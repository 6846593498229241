"""Wait-free layer-wise gradient sync (Poseidon's DWBP), with blocking and DDP comparison modes.

A post-accumulate-grad hook on every parameter counts down its layer; when a layer's last
gradient lands, the layer's gradients are flattened into one buffer and its all-reduce is
launched asynchronously while backward carries on with the layers below. ``finish()``, right
before ``optimizer.step()``, waits for the handles and writes the averaged gradients back.

Gradients are averaged by seeds, so uneven batch shares are exact: each rank's gradient is a
mean over its ``n_r`` seeds; it is multiplied by ``n_r`` before the sum and divided by
``N = sum_r n_r`` after it (``N`` comes from a one-number all-reduce issued in
``begin_step``). A rank with no seeds contributes zeros.

Collectives on one group must be issued in the same order on every rank, but autograd may
finish layers in a different order on different ranks (a parameter unused on one rank).
So layers are launched in ONE fixed order (reverse registration order, which is backward
order for ordinary models): a layer that becomes ready early waits until every layer
before it in that order has launched. A layer that never becomes ready (unused parameters)
is flushed with zeros in ``finish()``. Every rank thus issues the same collectives in the
same order, and nothing deadlocks.

Modes (one flag; the per-step calls are the same):

- ``"dwbp"``: launch per layer from the hooks; wait in ``finish()``.
- ``"blocking"``: after backward, in ``finish()``, all-reduce each layer and wait for it
  before the next (compute, then communicate: ``T_seq``).
- ``"ddp"``: torch ``DistributedDataParallel`` through ``comm.ddp_wrap``; a comm hook scales
  each bucket by ``n_r / N`` and sums, so the weighting matches the other modes without
  touching the loss. Forward must go through ``sync.model`` (the DDP wrapper).

Per step (all modes)::

    sync = LayerwiseSync(model, mode="dwbp")
    model = sync.model                      # the DDP wrapper in "ddp" mode, else model itself
    for batch in loader:
        optimizer.zero_grad()
        sync.begin_step(num_seeds)          # before forward or before backward
        loss = loss_fn(model(x, blocks), y) # mean over this rank's seeds
        loss.backward()                     # dwbp: collectives launch from here
        sync.finish()                       # waits, writes seed-weighted mean gradients
        optimizer.step()

Example:
    >>> import torch, warnings
    >>> net = torch.nn.Linear(2, 1)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # no process group here: nothing to synchronise
    ...     sync = LayerwiseSync(net)
    >>> sync.begin_step(4); net(torch.ones(4, 2)).mean().backward(); stats = sync.finish()
    >>> stats.num_seeds, stats.total_seeds
    (4, 4)
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence, Union

import torch
from torch import nn

from graphdist import comm
from graphdist.sync.timing import dwbp_timing

logger = logging.getLogger(__name__)

MODES = ("dwbp", "blocking", "ddp")
LayerSpec = Sequence[Union[nn.Module, nn.Parameter, Sequence[Union[nn.Module, nn.Parameter]]]]


# ---------------------------------------------------------------- records


@dataclass
class Layer:
    """A unit of synchronisation: parameters flattened into one buffer, one collective."""

    name: str
    params: list[nn.Parameter]
    numel: int


@dataclass
class LayerTiming:
    """One layer's events in one step, in seconds since ``begin_step``."""

    name: str
    numel: int
    ready_s: Optional[float]  # last gradient landed (None: flushed in finish())
    launch_s: float
    complete_s: float  # the backend finished (callback), or the wait returned
    comm_s: float  # service time: complete - max(launch, previous layer's complete)


@dataclass
class StepStats:
    """Timing of one step. Times in seconds; ``comm_s`` is 0.0 where not measured (ddp)."""

    step: int
    mode: str
    num_seeds: int
    total_seeds: int
    backward_s: float  # first gradient hook to last (ddp: begin_step to finish)
    comm_s: float  # sum of the layers' collective service times, T_comm
    exposed_s: float  # time finish() blocked: communication not hidden behind backward
    t_seq_s: float  # backward_s + comm_s: what compute-then-communicate would take
    t_dwbp_s: float  # backward_s + exposed_s
    hidden_fraction: float  # (t_seq - t_dwbp) / comm_s, clipped to [0, 1]; nan if comm_s == 0
    predicted_hidden_fraction: float  # DESIGN.md §6's model on this step's b_l and c_l
    layers: list[LayerTiming] = field(default_factory=list)


@dataclass
class SyncSummary:
    """Totals over all steps since construction (or ``reset_summary``)."""

    steps: int = 0
    backward_s: float = 0.0
    comm_s: float = 0.0
    exposed_s: float = 0.0

    @property
    def hidden_fraction(self) -> float:
        """Share of communication time hidden behind backward, over all steps (nan: none)."""
        if self.comm_s <= 0:
            return float("nan")
        return min(1.0, max(0.0, (self.comm_s - self.exposed_s) / self.comm_s))


# ------------------------------------------------------------------ state


@dataclass
class LayerwiseSyncState:
    """Everything a :class:`LayerwiseSync` holds, grouped by how often it is changed."""

    # tuned often
    mode: str
    # tuned seldom
    group: Any = None  # process group; None: the default group
    tag: str = "grad"  # byte-counter tag of every collective here
    find_unused_parameters: bool = False  # ddp only: DDP needs it when a parameter may get no grad
    # internal
    distributed: bool = False
    world_size: int = 1
    layers: list[Layer] = field(default_factory=list)  # in launch (backward) order
    owner: dict[int, int] = field(default_factory=dict)  # id(param) -> index into layers
    step: int = 0
    active: bool = False  # between begin_step and finish
    num_seeds: int = 0
    total_seeds: int = 0
    count: Optional[torch.Tensor] = None
    count_handle: Any = None
    remaining: list[int] = field(default_factory=list)  # gradients still missing, per layer
    next_launch: int = 0  # layers[:next_launch] have launched
    buffers: list[Optional[torch.Tensor]] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    t_begin: float = 0.0
    t_first_hook: Optional[float] = None
    t_last_hook: Optional[float] = None
    ready_at: list[Optional[float]] = field(default_factory=list)
    launch_at: list[float] = field(default_factory=list)
    complete_at: list[Optional[float]] = field(default_factory=list)


def _validate(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"Expected mode one of {MODES} (got {mode!r}); e.g. --sync dwbp")


# --------------------------------------------------------------- layering


def discover_layers(model: nn.Module) -> list[Layer]:
    """Layers in forward (registration) order: every module owning trainable parameters directly.

    A container such as PyG's ``GraphSAGE.convs`` owns none and is not a layer; each conv's
    ``Linear`` is. A parameter shared by two modules belongs to the first.

    Example:
        >>> [l.name for l in discover_layers(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()))]
        ['0']
    """
    seen: set[int] = set()
    layers = []
    for name, module in model.named_modules():
        params = [p for p in module.parameters(recurse=False) if p.requires_grad and id(p) not in seen]
        if params:
            seen.update(id(p) for p in params)
            layers.append(Layer(name or type(module).__name__, params, sum(p.numel() for p in params)))
    return layers


def _explicit_layers(model: nn.Module, spec: LayerSpec) -> list[Layer]:
    layers, seen = [], set()
    for i, entry in enumerate(spec):
        items = [entry] if isinstance(entry, (nn.Module, nn.Parameter)) else list(entry)
        params: list[nn.Parameter] = []
        for item in items:
            found = [item] if isinstance(item, nn.Parameter) else list(item.parameters())
            for p in found:
                if not p.requires_grad:
                    continue
                if id(p) in seen:
                    raise ValueError(f"Expected every parameter in one layer only (got a repeat in layer {i})")
                seen.add(id(p))
                params.append(p)
        if params:
            name = _module_name(model, entry) or f"group{i}"
            layers.append(Layer(name, params, sum(p.numel() for p in params)))
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in seen]
    if missing:
        raise ValueError(
            f"Expected every trainable parameter in exactly one layer (got {len(missing)} in none: "
            f"{', '.join(missing[:5])}{'...' if len(missing) > 5 else ''}); add them to `layers`"
        )
    return layers


def _module_name(model: nn.Module, entry: Any) -> Optional[str]:
    if isinstance(entry, nn.Module):
        for name, module in model.named_modules():
            if module is entry:
                return name or type(module).__name__
    return None


# ------------------------------------------------------------------ sync


class LayerwiseSync:
    """Seed-weighted gradient averaging across ranks: wait-free per layer, blocking, or DDP.

    Args:
        model: the model (not yet wrapped).
        mode: ``"dwbp"`` (default), ``"blocking"`` or ``"ddp"``.
        group: process group (default: the default group).
        layers: optional explicit grouping, in forward order: each entry a module, a parameter,
            or a list of them; every trainable parameter must appear exactly once.
            Default: every module that owns parameters directly (:func:`discover_layers`).
        find_unused_parameters: ``"ddp"`` only; pass when a parameter may get no gradient.
        tag: byte-counter tag (default ``"grad"``).

    Raises:
        ValueError: on an unknown mode or a grouping that misses or repeats a parameter.

    Example:
        >>> sync = LayerwiseSync(torch.nn.Linear(4, 2), mode="blocking")  # doctest: +SKIP
        >>> [layer.name for layer in sync.layers]  # doctest: +SKIP
        ['Linear']
    """

    def __init__(
        self,
        model: nn.Module,
        mode: str = "dwbp",
        group: Any = None,
        layers: Optional[LayerSpec] = None,
        *,
        find_unused_parameters: bool = False,
        tag: str = "grad",
    ) -> None:
        _validate(mode)
        distributed = comm.is_initialized()
        state = LayerwiseSyncState(mode=mode, group=group, tag=tag, find_unused_parameters=find_unused_parameters)
        state.distributed = distributed and comm.get_world_size() > 1
        state.world_size = comm.get_world_size() if distributed else 1
        forward_order = discover_layers(model) if layers is None else _explicit_layers(model, layers)
        state.layers = list(reversed(forward_order))  # launch in backward order
        state.owner = {id(p): i for i, layer in enumerate(state.layers) for p in layer.params}
        self.state = state
        self.timeline: list[tuple[str, str, float]] = []  # (event, layer, seconds since begin_step)
        self.last_step_stats: Optional[StepStats] = None
        self.summary = SyncSummary()
        self._hooks: list[Any] = []
        self._model = model
        self._warn_pointless(layers)
        if mode == "ddp" and state.distributed:
            self._model = comm.ddp_wrap(
                model, group=group, find_unused_parameters=find_unused_parameters, grad_scale=self._ddp_scale, tag=tag
            )
        elif mode != "ddp":
            self._register_hooks()
        self._log_once()

    # ------------------------------------------------------------ public

    @property
    def model(self) -> nn.Module:
        """The module to run forward through: the DDP wrapper in ``"ddp"`` mode, else the model."""
        return self._model

    @property
    def layers(self) -> list[Layer]:
        """Layers in launch (backward) order."""
        return self.state.layers

    def begin_step(self, num_seeds: int) -> None:
        """Starts a step: ``num_seeds`` is this rank's seed count (the loss is their mean).

        Call before backward (before forward is fine too). Issues the seed-count all-reduce
        asynchronously; it is waited for in :meth:`finish` (or by the ddp comm hook).

        Raises:
            RuntimeError: if the previous step was not finished.
            ValueError: on a negative count.
        """
        s = self.state
        if s.active:
            raise RuntimeError("begin_step() called twice without finish(); call sync.finish() before optimizer.step()")
        if num_seeds < 0:
            raise ValueError(f"Expected num_seeds >= 0 (got {num_seeds})")
        self._reset_step(int(num_seeds))
        self._event("begin", "")
        if s.distributed:
            s.count = torch.tensor([float(num_seeds)], dtype=torch.float64)
            s.count_handle = comm.all_reduce_async(s.count, group=s.group, tag=s.tag)

    def finish(self) -> StepStats:
        """Completes gradient sync; call right before ``optimizer.step()``.

        Returns:
            This step's :class:`StepStats` (also in ``last_step_stats``).

        Raises:
            RuntimeError: without a matching :meth:`begin_step`.
            CommError: if a collective fails (names the rank).
        """
        s = self.state
        if not s.active:
            raise RuntimeError("finish() without begin_step(num_seeds); call it before backward")
        t0 = time.perf_counter()
        if s.mode == "ddp":
            self._total_seeds()  # DDP synced inside backward; the count is only for stats
        elif s.distributed:
            self._flush_and_wait()
            if s.step == 1 and s.mode == "dwbp":
                self._learn_order()
        t1 = time.perf_counter()
        s.active = False
        self._event("finish", "")
        stats = self._step_stats(exposed=t1 - t0, t_end=t1)
        self.last_step_stats = stats
        self._accumulate(stats)
        return stats

    def close(self) -> None:
        """Removes the gradient hooks (the sync object is unusable afterwards)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()

    def reset_summary(self) -> None:
        """Starts the cumulative :attr:`summary` afresh (e.g. per epoch)."""
        self.summary = SyncSummary()

    # ------------------------------------------------------------ hooks

    def _register_hooks(self) -> None:
        for layer in self.state.layers:
            for p in layer.params:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._on_grad))

    def _on_grad(self, param: torch.Tensor) -> None:
        s = self.state
        if not s.active:
            raise RuntimeError("a gradient arrived outside begin_step()/finish(); call sync.begin_step(n) each step")
        now = self._event("grad", "")
        s.t_first_hook = now if s.t_first_hook is None else s.t_first_hook
        s.t_last_hook = now
        index = s.owner[id(param)]
        s.remaining[index] -= 1
        if s.remaining[index] < 0:
            raise RuntimeError(
                f"layer {s.layers[index].name} got a second gradient in one step; "
                "LayerwiseSync supports one backward per begin_step()/finish()"
            )
        if s.remaining[index] == 0:
            s.ready_at[index] = self._event("ready", s.layers[index].name)
            if s.mode == "dwbp" and s.distributed:
                self._launch_in_order()

    def _launch_in_order(self) -> None:
        """Launches every ready layer whose predecessors in the fixed order have launched."""
        s = self.state
        while s.next_launch < len(s.layers) and s.remaining[s.next_launch] == 0:
            self._launch(s.next_launch)
            s.next_launch += 1

    # ---------------------------------------------------------- collectives

    def _launch(self, index: int) -> None:
        """Flattens layer ``index``'s gradients (times the local seed count) and starts its all-reduce."""
        s = self.state
        layer = s.layers[index]
        buf = torch.cat([_flat_grad(p) for p in layer.params])
        if s.num_seeds == 0:
            buf.zero_()  # no seeds: the "mean" gradient may be nan; contribute nothing
        elif s.num_seeds != 1:
            buf.mul_(float(s.num_seeds))
        s.buffers[index] = buf
        s.launch_at[index] = self._event("launch", layer.name)
        handle = comm.all_reduce_async(buf, group=s.group, tag=s.tag)
        s.handles[index] = handle
        handle.add_done_callback(lambda: self._completed(index))

    def _completed(self, index: int) -> None:
        # Runs on the backend's thread: one float store, nothing that could raise.
        self.state.complete_at[index] = time.perf_counter() - self.state.t_begin

    def _flush_and_wait(self) -> None:
        s = self.state
        if s.mode == "blocking":
            for index in range(len(s.layers)):
                self._launch(index)
                self._wait(index)
        else:
            while s.next_launch < len(s.layers):  # layers that never became ready: zeros
                self._launch(s.next_launch)
                s.next_launch += 1
            for index in range(len(s.layers)):
                self._wait(index)
        total = self._total_seeds()
        for index in range(len(s.layers)):
            self._write_back(index, total)

    def _wait(self, index: int) -> None:
        s = self.state
        self._event("wait", s.layers[index].name)
        s.handles[index].wait()
        done = self._event("waited", s.layers[index].name)
        if s.complete_at[index] is None:  # backend without futures: the wait is the best we know
            s.complete_at[index] = done

    def _total_seeds(self) -> int:
        s = self.state
        if s.count_handle is not None:
            s.count_handle.wait()
            s.total_seeds = int(round(float(s.count.item())))
            s.count_handle = None
        return s.total_seeds

    def _write_back(self, index: int, total: int) -> None:
        buf = self.state.buffers[index]
        if total > 0:
            buf.div_(float(total))
        else:
            buf.zero_()
        offset = 0
        for p in self.state.layers[index].params:
            view = buf[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
            if p.grad is None:
                p.grad = view.clone()
            else:
                p.grad.copy_(view)

    def _learn_order(self) -> None:
        """After the first step, launch in the order backward actually finished layers.

        Registration order is only a guess at backward order; a layer it puts early that
        becomes ready late (or never: unused parameters) holds back every layer after it.
        All ranks must agree on the order, so they take rank 0's observation (one small
        broadcast, once). Layers that never became ready go last.
        """
        s = self.state
        never = float("inf")
        observed = sorted(range(len(s.layers)), key=lambda i: (s.ready_at[i] if s.ready_at[i] is not None else never, i))
        order = comm.broadcast_object([s.layers[i].name for i in observed] if comm.get_rank() == 0 else None,
                                      src=0, group=s.group)
        by_name = {layer.name: layer for layer in s.layers}
        if sorted(order) != sorted(by_name) or len(order) != len(s.layers):
            logger.warning("[rank %d] layer names differ across ranks; keeping the registration order", comm.get_rank())
            return
        s.layers = [by_name[name] for name in order]
        s.owner = {id(p): i for i, layer in enumerate(s.layers) for p in layer.params}

    def _ddp_scale(self) -> float:
        """Called by the ddp comm hook per bucket during backward: ``n_r / N``."""
        total = self._total_seeds()
        return self.state.num_seeds / total if total > 0 else 0.0

    # ------------------------------------------------------------ bookkeeping

    def _reset_step(self, num_seeds: int) -> None:
        s = self.state
        n = len(s.layers)
        s.active, s.step = True, s.step + 1
        s.num_seeds, s.total_seeds = num_seeds, num_seeds  # total: replaced by the all-reduce
        s.count_handle, s.next_launch = None, 0
        s.remaining = [len(layer.params) for layer in s.layers]
        s.buffers, s.handles = [None] * n, [None] * n
        s.ready_at, s.launch_at, s.complete_at = [None] * n, [0.0] * n, [None] * n
        s.t_first_hook = s.t_last_hook = None
        self.timeline = []
        s.t_begin = time.perf_counter()

    def _event(self, kind: str, layer: str) -> float:
        t = time.perf_counter() - self.state.t_begin
        self.timeline.append((kind, layer, t))
        return t

    def _step_stats(self, exposed: float, t_end: float) -> StepStats:
        s = self.state
        end = t_end - s.t_begin
        if s.mode == "ddp" or s.t_first_hook is None:
            backward = end if s.mode == "ddp" else 0.0
            return _stats(s, backward, 0.0, exposed, float("nan"), [])
        backward = s.t_last_hook - s.t_first_hook
        layers = self._layer_timings()
        comm_s = sum(t.comm_s for t in layers)
        b = _backward_per_layer(s.t_first_hook, [t.ready_s for t in layers])
        predicted = dwbp_timing(0.0, b, [t.comm_s for t in layers]).hidden_fraction if comm_s > 0 else float("nan")
        return _stats(s, backward, comm_s, exposed, predicted, layers)

    def _layer_timings(self) -> list[LayerTiming]:
        s = self.state
        out, prev_complete = [], 0.0
        for i, layer in enumerate(s.layers):
            if s.handles[i] is None:
                continue
            complete = s.complete_at[i] if s.complete_at[i] is not None else s.launch_at[i]
            service = max(0.0, complete - max(s.launch_at[i], prev_complete))
            prev_complete = max(prev_complete, complete)
            out.append(LayerTiming(layer.name, layer.numel, s.ready_at[i], s.launch_at[i], complete, service))
        return out

    def _accumulate(self, stats: StepStats) -> None:
        self.summary.steps += 1
        self.summary.backward_s += stats.backward_s
        self.summary.comm_s += stats.comm_s
        self.summary.exposed_s += stats.exposed_s if stats.comm_s > 0 else 0.0

    def _warn_pointless(self, layers: Optional[LayerSpec]) -> None:
        s = self.state
        if not s.distributed:
            warnings.warn(
                "LayerwiseSync without a process group of 2+ ranks: nothing to synchronise; "
                "gradients stay as computed (timings are still recorded)",
                stacklevel=3,
            )
        if s.mode == "ddp" and layers is not None:
            warnings.warn("`layers` is ignored in ddp mode: DDP forms its own buckets", stacklevel=3)
        if s.mode != "ddp" and s.find_unused_parameters:
            warnings.warn(
                "find_unused_parameters only matters in ddp mode; dwbp/blocking flush unused layers anyway",
                stacklevel=3,
            )

    def _log_once(self) -> None:
        s = self.state
        if comm.is_main_process():
            numel = sum(layer.numel for layer in s.layers)
            logger.info(
                "LayerwiseSync mode=%s world=%d layers=%d params=%s (%s) group=%s",
                s.mode, s.world_size, len(s.layers), f"{numel:,}",
                ", ".join(layer.name for layer in s.layers[:6]) + ("..." if len(s.layers) > 6 else ""),
                "default" if s.group is None else "custom",
            )


# ------------------------------------------------------------------ helpers


def _flat_grad(p: torch.Tensor) -> torch.Tensor:
    if p.grad is None:
        return torch.zeros(p.numel(), dtype=p.dtype, device=p.device)
    return p.grad.reshape(-1)


def _backward_per_layer(t_first: float, ready: Sequence[Optional[float]]) -> list[float]:
    """b_l from ready times in launch order (a flushed layer took no backward time)."""
    out, prev = [], t_first
    for r in ready:
        if r is None:
            out.append(0.0)
            continue
        out.append(max(0.0, r - prev))
        prev = max(prev, r)
    return out


def _stats(
    s: LayerwiseSyncState, backward: float, comm_s: float, exposed: float, predicted: float, layers: list[LayerTiming]
) -> StepStats:
    if comm_s > 0:
        hidden = min(1.0, max(0.0, (comm_s - exposed) / comm_s))
    else:
        hidden = float("nan")
    return StepStats(
        step=s.step,
        mode=s.mode,
        num_seeds=s.num_seeds,
        total_seeds=s.total_seeds,
        backward_s=backward,
        comm_s=comm_s,
        exposed_s=exposed,
        t_seq_s=backward + comm_s,
        t_dwbp_s=backward + exposed,
        hidden_fraction=hidden,
        predicted_hidden_fraction=predicted,
        layers=layers,
    )


def wait_free_witness(timeline: Iterable[tuple[str, str, float]], output_layer: str) -> bool:
    """Whether some other layer became ready while ``output_layer``'s collective was in flight.

    In flight = launched and not yet waited on. This is the property that makes DWBP wait-free;
    an implementation that waits inside the hook never shows it.

    Example:
        >>> wait_free_witness([("launch", "out", 0.1), ("ready", "hid", 0.2), ("wait", "out", 0.3)], "out")
        True
    """
    in_flight = False
    for kind, layer, _t in timeline:
        if layer == output_layer and kind == "launch":
            in_flight = True
        elif layer == output_layer and kind == "wait":
            in_flight = False
        elif in_flight and kind == "ready" and layer != output_layer:
            return True
    return False


__all__ = [
    "Layer",
    "LayerTiming",
    "LayerwiseSync",
    "LayerwiseSyncState",
    "MODES",
    "StepStats",
    "SyncSummary",
    "discover_layers",
    "wait_free_witness",
]
