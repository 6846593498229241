"""``--sync ddp``: torch ``DistributedDataParallel`` (its own buckets and overlap) with graphdist's hook.

The comparison point for DWBP. DDP decides when buckets go out; what they send is the same
:func:`~graphdist.sync.hooks.seed_weighted_allreduce` that ``LayerwiseSync`` calls, registered
with ``register_comm_hook``, so the weighting is identical and written once. Forward must go
through ``sync.model`` (the DDP wrapper).

Example:
    >>> import torch
    >>> from graphdist.testing import one_rank_group
    >>> with one_rank_group():
    ...     sync = DdpSync(torch.nn.Linear(2, 1))
    ...     sync.begin_step(3); sync.model(torch.ones(3, 2)).mean().backward()
    ...     stats = sync.finish()
    >>> type(sync.model).__name__, stats.total_seeds
    ('DistributedDataParallel', 3)
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Optional

from torch import nn

from graphdist import comm
from graphdist.sync.base import GradientSync
from graphdist.sync.hooks import AllreduceState, seed_weighted_allreduce
from graphdist.sync.modes import COMPRESSIONS, SYNC_MODES
from graphdist.sync.stats import StepStats
from graphdist.sync.tables import TableExchange


class DdpSync(GradientSync):
    """Gradient sync by torch DDP, buckets sent through the seed-weighting hook.

    Args:
        model: the model (wrapped here; ``sync.model`` is the wrapper).
        group: process group (default: the default group).
        find_unused_parameters: pass when a parameter may get no gradient in a step.
        algorithm: the allreduce algorithm of the hook (default: ring).
        tag: byte-counter tag (default ``"grad"``).
        seed_weighted: weight gradients by seed share (default) or sum them (``SeedWeights``).
        compress: ``none``, or ``fp16`` / ``bf16``: torch's own ``fp16_compress_wrapper`` /
            ``bf16_compress_wrapper`` around the hook (DDP with its own compression: the
            comparison point for ``--compress``). DDP has no int8 hook.
        **ddp_kwargs: passed to ``DistributedDataParallel`` (e.g. ``bucket_cap_mb``).

    Raises:
        ValueError: ``compress`` other than none, fp16, bf16.
    """

    mode = "ddp"

    def __init__(
        self,
        model: nn.Module,
        group: Any = None,
        find_unused_parameters: bool = False,
        algorithm: Optional[comm.AllreduceAlgorithm] = None,
        tag: str = "grad",
        seed_weighted: bool = True,
        compress: str = "none",
        **ddp_kwargs: Any,
    ) -> None:
        super().__init__()
        if not SYNC_MODES["ddp"].sends(compress) or compress == "auto":
            raise ValueError(f"--compress {compress} needs --sync dwbp or blocking: torch DDP sends "
                             f"{', '.join(SYNC_MODES['ddp'].compressions)} only (auto resolved first)")
        self.hook_state = AllreduceState.create(algorithm, group, tag, seed_weighted)
        wrapper = COMPRESSIONS[compress].ddp_wrapper
        hook = comm.torch_compress_wrapper(wrapper, seed_weighted_allreduce) if wrapper else seed_weighted_allreduce
        self._step = 0
        self._t_begin = 0.0
        self._active = False
        self._num_seeds = 0
        self.tables = TableExchange(model, group, tag)  # sparse tables: their rows travel in finish()
        if comm.is_initialized():
            # Gradients live in DDP's buckets (the per-layer sync does the same): without it every gradient is
            # held twice, which for a typed graph's embedding table is its whole size again.
            ddp_kwargs.setdefault("gradient_as_bucket_view", True)
            self._model = comm.ddp_wrap(model, group=group, find_unused_parameters=find_unused_parameters,
                                        comm_hook=hook, hook_state=self.hook_state, ignore=self.tables.names,
                                        **ddp_kwargs)
        else:
            warnings.warn("DdpSync without a process group: nothing to synchronise; the model runs unwrapped",
                          stacklevel=2)
            self._model = model

    @property
    def model(self) -> nn.Module:
        return self._model

    def close(self) -> None:
        """Drops the DDP wrapper: its reducer's autograd hooks on the model's parameters go with it, so the model
        can train on under another sync (``--sync auto``'s re-check)."""
        import gc

        inner = comm.ddp_unwrap(self._model)
        if inner is not self._model:
            self._model = inner
            gc.collect()  # the wrapper sits in reference cycles: its reducer (and hooks) go now, not later

    def begin_step(self, num_seeds: int) -> None:
        if self._active:
            raise RuntimeError("begin_step() called twice without finish(); call sync.finish() before optimizer.step()")
        self.hook_state.weights.begin_step(int(num_seeds))
        self._step += 1
        self._active, self._num_seeds, self._t_begin = True, int(num_seeds), time.perf_counter()

    def finish(self) -> StepStats:
        """DDP synced inside backward; this exchanges the sparse tables' rows and closes the step."""
        if not self._active:
            raise RuntimeError("finish() without begin_step(num_seeds); call it before backward")
        t0 = time.perf_counter()
        count_wait = self.hook_state.weights.wait_s  # in backward's hooks (a wait here is in t1 - t0)
        total = self.hook_state.weights.total()
        if self.tables:
            self.tables.exchange(self.hook_state.weights.scale())
        t1 = time.perf_counter()
        self._active = False
        # DDP's overlap is not observable from here: backward is begin_step..finish, comm unmeasured.
        return self._record(StepStats(self._step, self.mode, self._num_seeds, total, t1 - self._t_begin, 0.0,
                                      t1 - t0, float("nan"), [], count_wait_s=count_wait))


__all__ = ["DdpSync"]
