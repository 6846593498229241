"""Model averagers: every rank trains alone, and now and then the parameters are averaged.

The shape of torch's ``model_averaging.averagers``: one method, ``average_parameters(tensors)``,
called after every optimizer step, and a step counter; the averager decides whether this step
averages. :class:`PeriodicAverager` averages every K steps; :class:`TimedAverager` every T
seconds. Ranks must average at the same step (it is a collective), so the timed one decides
with a one-number all-reduce each step (a rank whose clock says "due" makes it due for all),
never by each rank's own clock alone. ``average_now`` averages unconditionally (the strategy
calls it at every epoch end, so every rank evaluates and checkpoints the same model).

``overlap=True`` (``--avg-overlap``) hides a due average behind the next step, as Overlap-Local-SGD
(Wang et al., 2020) does: the due step starts the all-reduce of a snapshot and training goes on;
the next call lands it, keeping the step the rank took meanwhile (``p <- mean(snapshot) + (p -
snapshot)``). Every rank still averages at the same step. ``average_now`` lands a pending average
first, so the epoch's last average stays synchronous and nothing is in flight at a checkpoint.

Tensors are flattened into one buffer per dtype, summed by an allreduce algorithm
(``graphdist.comm.algorithms``, bytes under the tag ``param``) and divided by the world size.

Example:
    >>> import torch, warnings
    >>> w = torch.nn.Linear(2, 2)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # one process: averaging is pointless, and says so
    ...     avg = PeriodicAverager(period=2)
    >>> [avg.average_parameters(w.parameters()) for _ in range(4)], avg.step
    ([False, True, False, True], 4)
"""

from __future__ import annotations

import abc
import time
import warnings
from typing import Any, Iterable, Optional

import torch

from graphdist import comm

TAG = "param"


class ModelAverager(abc.ABC):
    """Averages tensors over ranks when :meth:`due` says so; counts steps.

    Args:
        group: process group (default: the default group).
        algorithm: the allreduce algorithm (default: ring).
        tag: byte-counter tag (default ``param``).
        overlap: land each due average at the next call instead of at once (see the module doc).
    """

    def __init__(self, group: Any = None, algorithm: Optional[comm.AllreduceAlgorithm] = None, tag: str = TAG,
                 overlap: bool = False) -> None:
        self.group, self.tag, self.overlap = group, tag, bool(overlap)
        self._pending: list[tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, Any]] = []
        self.algorithm = algorithm if algorithm is not None else comm.allreduce_algorithm("ring")
        self.world_size = comm.get_world_size() if comm.is_initialized() else 1
        self.step = 0
        self.averages = 0
        if self.world_size == 1:
            warnings.warn(f"{type(self).__name__} without a process group of 2+ ranks: averaging changes nothing",
                          stacklevel=3)

    @abc.abstractmethod
    def due(self) -> bool:
        """Whether this step averages (the same answer on every rank; may be collective)."""

    def average_parameters(self, tensors: Iterable[torch.Tensor]) -> bool:
        """Call after each optimizer step: averages ``tensors`` in place when due (with ``overlap``, starts it and
        lands it at the next call); returns whether this step averages. Lands a pending average first."""
        tensors = list(tensors)
        self.step += 1
        self._land()
        if not self.due():
            return False
        if self.overlap and self.world_size > 1:
            self.averages += 1
            self._pending = self._issue(tensors, snapshot=True)
            self._on_average()
        else:
            self.average_now(tensors)
        return True

    @torch.no_grad()
    def average_now(self, tensors: Iterable[torch.Tensor]) -> None:
        """Averages ``tensors`` over ranks in place, now (collective: every rank calls it); a pending
        overlapped average lands first."""
        self._land()
        self.averages += 1
        self._on_average()
        if self.world_size == 1:
            return
        for group, flat, _, handle in self._issue(tensors, snapshot=False):
            handle.wait()
            _scatter(group, flat.div_(self.world_size))

    def _on_average(self) -> None:
        """Called when an average starts (the timed averager restarts its clock)."""

    @torch.no_grad()
    def _issue(self, tensors: Iterable[torch.Tensor],
               snapshot: bool) -> list[tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, Any]]:
        """Starts one all-reduce per dtype and device over the flattened ``tensors``:
        ``(group, summed buffer, snapshot or the buffer itself, handle)``."""
        by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault((t.dtype, t.device), []).append(t)
        out = []
        for group in by_dtype.values():
            flat = torch.cat([t.reshape(-1) for t in group])
            snap = flat.clone() if snapshot else flat
            out.append((group, flat, snap, self.algorithm(flat, self.group, self.tag)))
        return out

    @torch.no_grad()
    def _land(self) -> None:
        """Applies a pending overlapped average: ``p += mean(snapshot) - snapshot``, which keeps the
        steps taken since the snapshot."""
        pending, self._pending = self._pending, []
        for group, flat, snap, handle in pending:
            handle.wait()
            _scatter(group, flat.div_(self.world_size).sub_(snap), add=True)

    def state_dict(self) -> dict[str, Any]:
        if self._pending:
            raise RuntimeError("An overlapped average is in flight; call average_now() (the epoch's end does) "
                               "before saving the averager")
        return {"step": self.step, "averages": self.averages}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.averages = int(state["step"]), int(state["averages"])


class PeriodicAverager(ModelAverager):
    """Averages every ``period`` steps (``--avg-every K``).

    Raises:
        ValueError: ``period < 1``.
    """

    def __init__(self, period: int, **kwargs: Any) -> None:
        if period < 1:
            raise ValueError(f"--avg-every must be >= 1 (got {period})")
        super().__init__(**kwargs)
        self.period = int(period)

    def due(self) -> bool:
        return self.step % self.period == 0


class TimedAverager(ModelAverager):
    """Averages once ``seconds`` have passed since the last average (``--avg-seconds T``).

    Every step all-reduces one flag (max): if any rank's clock says due, every rank averages at
    that step, so they always agree.
    """

    def __init__(self, seconds: float, **kwargs: Any) -> None:
        if seconds <= 0:
            raise ValueError(f"--avg-seconds must be > 0 (got {seconds})")
        super().__init__(**kwargs)
        self.seconds = float(seconds)
        self._last = time.perf_counter()

    def due(self) -> bool:
        flag = torch.tensor([1.0 if time.perf_counter() - self._last >= self.seconds else 0.0])
        if self.world_size > 1:
            comm.all_reduce(flag, op="max", group=self.group, tag="control")
        return bool(flag.item() > 0)

    def _on_average(self) -> None:
        self._last = time.perf_counter()


def _scatter(group: list[torch.Tensor], flat: torch.Tensor, add: bool = False) -> None:
    """Copies (or adds) consecutive slices of ``flat`` into the tensors of ``group``."""
    offset = 0
    for t in group:
        piece = flat[offset : offset + t.numel()].view_as(t)
        t.add_(piece) if add else t.copy_(piece)
        offset += t.numel()


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The floating-point per-parameter state of ``optimizer`` (Adam's moments), to average with the parameters.

    Example:
        >>> p = torch.nn.Parameter(torch.ones(2)); opt = torch.optim.Adam([p])
        >>> p.sum().backward(); opt.step()
        >>> [t.shape for t in optimizer_tensors(opt)]
        [torch.Size([2]), torch.Size([2])]
    """
    out = []
    for group in optimizer.param_groups:  # parameter order, not state-creation order: the same on every rank
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            out.extend(v for _, v in sorted(state.items()) if torch.is_tensor(v) and v.is_floating_point()
                       and v.dim() > 0)
    return out


__all__ = ["ModelAverager", "PeriodicAverager", "TAG", "TimedAverager", "optimizer_tensors"]
