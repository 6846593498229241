"""Model averagers: every rank trains alone, and now and then the parameters are averaged.

The shape of torch's ``model_averaging.averagers``: one method, ``average_parameters(tensors)``,
called after every optimizer step, and a step counter; the averager decides whether this step
averages. :class:`PeriodicAverager` averages every K steps; :class:`TimedAverager` every T
seconds. Ranks must average at the same step (it is a collective), so the timed one decides
with a one-number all-reduce each step (a rank whose clock says "due" makes it due for all),
never by each rank's own clock alone. ``average_now`` averages unconditionally (the strategy
calls it at every epoch end, so every rank evaluates and checkpoints the same model).

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
    """

    def __init__(self, group: Any = None, algorithm: Optional[comm.AllreduceAlgorithm] = None, tag: str = TAG) -> None:
        self.group, self.tag = group, tag
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
        """Call after each optimizer step: averages ``tensors`` in place when due; returns whether it did."""
        self.step += 1
        if not self.due():
            return False
        self.average_now(tensors)
        return True

    @torch.no_grad()
    def average_now(self, tensors: Iterable[torch.Tensor]) -> None:
        """Averages ``tensors`` over ranks in place, now (collective: every rank calls it)."""
        self.averages += 1
        if self.world_size == 1:
            return
        by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault((t.dtype, t.device), []).append(t)
        for group in by_dtype.values():
            flat = torch.cat([t.reshape(-1) for t in group])
            self.algorithm(flat, self.group, self.tag).wait()
            flat.div_(self.world_size)
            offset = 0
            for t in group:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()

    def state_dict(self) -> dict[str, Any]:
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

    @torch.no_grad()
    def average_now(self, tensors: Iterable[torch.Tensor]) -> None:
        super().average_now(tensors)
        self._last = time.perf_counter()


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
