"""``GradientSync``: the per-step calls every gradient sync answers, whatever it sends and when.

Per step::

    sync = make_sync("dwbp", model)         # or "blocking", "ddp"
    model = sync.model                      # the DDP wrapper in "ddp" mode, else model itself
    for batch in loader:
        optimizer.zero_grad()
        sync.begin_step(num_seeds)          # before forward or before backward
        loss = loss_fn(model(x, blocks), y) # mean over this rank's seeds
        loss.backward()                     # dwbp: collectives launch from here
        sync.finish()                       # waits, writes seed-weighted mean gradients
        optimizer.step()

Example:
    >>> sorted(SYNC_MODES)
    ['auto', 'blocking', 'ddp', 'dwbp']
"""

from __future__ import annotations

import abc
from typing import Any, Optional

from torch import nn

from graphdist.sync.modes import SYNC_MODES
from graphdist.sync.stats import StepStats, SyncSummary

class GradientSync(abc.ABC):
    """Seed-weighted gradient averaging across ranks, driven by ``begin_step`` / ``finish``.

    Attributes:
        last_step_stats: the last finished step's :class:`StepStats` (None before one).
        summary: totals since construction or :meth:`reset_summary`.
        timeline: the last step's ``(event, layer, seconds since begin_step)`` where the sync
            observes them (layer-wise modes); empty otherwise.
    """

    mode: str = ""

    def __init__(self) -> None:
        self.last_step_stats: Optional[StepStats] = None
        self.summary = SyncSummary()
        self.timeline: list[tuple[str, str, float]] = []
        # What an ``auto`` setting chose at construction, in a few words (``--compress auto``'s probe):
        # the start banner says it.
        self.choices: list[str] = []

    def state_dict(self) -> dict[str, Any]:
        """This rank's state that shapes later steps (int8's error-feedback residuals), for checkpoints."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`."""

    def describe(self) -> str:
        """The sync in a few words, for the start banner (``dwbp, SACP, allreduce ring``)."""
        return ", ".join([self.mode or type(self).__name__, *self.choices])

    @property
    @abc.abstractmethod
    def model(self) -> nn.Module:
        """The module to run forward through (a wrapper, or the model itself)."""

    @abc.abstractmethod
    def begin_step(self, num_seeds: int) -> None:
        """Starts a step: ``num_seeds`` is this rank's seed count (the loss is their mean)."""

    @abc.abstractmethod
    def finish(self) -> StepStats:
        """Completes the step's gradient sync; call right before ``optimizer.step()``."""

    def close(self) -> None:
        """Releases hooks (the sync object is unusable afterwards)."""

    def reset_summary(self) -> None:
        """Starts :attr:`summary` afresh (e.g. per epoch)."""
        self.summary = SyncSummary()

    def _record(self, stats: StepStats) -> StepStats:
        self.last_step_stats = stats
        self.summary.add_step(stats)
        return stats


class NoSync(GradientSync):
    """No gradient sync: each rank steps on its own gradients (model-averaging strategies train so).

    Example:
        >>> import torch
        >>> sync = NoSync(torch.nn.Linear(2, 1))
        >>> sync.begin_step(3); sync.model(torch.ones(3, 2)).sum().backward(); sync.finish().total_seeds
        3
    """

    mode = "none"

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self._model, self._step, self._n = model, 0, 0

    @property
    def model(self) -> nn.Module:
        return self._model

    def begin_step(self, num_seeds: int) -> None:
        self._step, self._n = self._step + 1, int(num_seeds)

    def finish(self) -> StepStats:
        return self._record(StepStats(self._step, self.mode, self._n, self._n, 0.0, 0.0, 0.0, float("nan"), []))


__all__ = ["GradientSync", "NoSync", "SYNC_MODES"]
