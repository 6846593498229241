"""Fault injection for tests and ``bench/bench_faults.py``.

* ``FailingModel``: a model wrapper that fails on one rank at a chosen forward call.
* ``fault_point(name)``: named injection points in the training path. ``GRAPHDIST_TEST_FAULT=
  POINT:RANK:HIT`` SIGKILLs rank RANK the HIT-th time it passes POINT (as the OOM killer or a
  dead host would end it); ``GRAPHDIST_TEST_FAULT=count:DIR`` instead keeps each process's
  counts in ``DIR/counts-<rank>-<pid>.json``, so a bench can aim at a pass that happens.
  comm does not import this module: a worker whose variable is set installs :func:`fault_point` as
  the ``fault`` hook of ``graphdist.plugins`` on entry (``load_plugins_from_environment``, which calls
  :func:`install`), and every ``comm.injection_point`` calls it. Unset, a point costs one dictionary
  lookup. Points: ``startup``, ``exchange:sample`` and
  ``exchange:feature`` (minibatch sampling and feature fetch), ``exchange:halo`` (full-graph),
  ``allreduce`` (gradients, averages, metrics), ``checkpoint`` (inside the write, before the
  rename), ``evaluate``. Under torchrun a fault fires in the job's first attempt only
  (``TORCHELASTIC_RESTART_COUNT`` 0), so ``--max-restarts`` can show the recovery.

It lives in an importable module (not a test file) because spawned workers must unpickle it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any, Optional

import torch

from graphdist.plugins import install as install_hook


class FailingModel(torch.nn.Module):
    """Wraps a model; on ``rank`` at forward call ``at_call`` it raises or kills its own process.

    Args:
        inner: the model doing the real work.
        rank: the rank that fails.
        mode: ``"raise"`` (a RuntimeError) or ``"kill"`` (SIGKILL, as the OOM killer does).
        at_call: 1-based forward call that fails.

    Example:
        In a job, ``FailingModel(GraphSAGE(...), rank=1, mode="kill")`` makes rank 1 die as the
        OOM killer would. Without a process group this process is rank 0:

        >>> from graphdist.models import GraphSAGE
        >>> from graphdist.testing import tiny_graph
        >>> from sampling import NeighborSampler
        >>> g = tiny_graph()
        >>> batch = NeighborSampler(g, [2, 2], seed=0).sample(torch.tensor([0, 1]))
        >>> model = FailingModel(GraphSAGE(1, 8, 3), rank=0, mode="raise", at_call=2)
        >>> model(g.x[batch.input_nodes], batch.blocks).shape  # call 1 runs the inner model
        torch.Size([2, 3])
        >>> model(g.x[batch.input_nodes], batch.blocks)
        Traceback (most recent call last):
        ...
        RuntimeError: injected failure on rank 0 at forward call 2
    """

    def __init__(self, inner: torch.nn.Module, rank: int = 1, mode: str = "raise", at_call: int = 2) -> None:
        super().__init__()
        if mode not in ("raise", "kill"):
            raise ValueError(f"mode must be 'raise' or 'kill' (got {mode!r})")
        self.inner = inner
        self.fail_rank, self.mode, self.at_call = rank, mode, at_call
        self.calls = 0

    @property
    def num_layers(self) -> int:
        return self.inner.num_layers

    def layer_forward(self, i: int, x: torch.Tensor, block: Any) -> torch.Tensor:
        return self.inner.layer_forward(i, x, block)

    def forward(self, x: torch.Tensor, blocks: Any) -> torch.Tensor:
        from graphdist import comm

        self.calls += 1
        if comm.get_rank() == self.fail_rank and self.calls >= self.at_call:
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure on rank {self.fail_rank} at forward call {self.calls}")
        return self.inner(x, blocks)


FAULT_VAR = "GRAPHDIST_TEST_FAULT"
_passes: dict[str, int] = {}
_lock = threading.Lock()  # the prefetch thread passes exchange points while the main thread reduces


def fault_point(point: str, rank: Optional[int] = None) -> None:
    """Counts a pass through ``point``; SIGKILLs this process on the pass ``GRAPHDIST_TEST_FAULT`` names.

    Example:
        >>> fault_point("startup", rank=0)  # unset: nothing happens
    """
    spec = os.environ.get(FAULT_VAR)
    if not spec or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return  # a fault is injected into a job once: torchrun's restarts of it run clean
    if rank is None:
        from graphdist import comm

        rank = comm.get_rank()
    with _lock:
        _passes[point] = _passes.get(point, 0) + 1
        passes = _passes[point]
        if spec.startswith("count:"):
            # rewritten at every pass: forked workers leave by os._exit, which runs no atexit handler
            _write_counts(spec[len("count:"):], rank)
            return
    name, want_rank, hit = spec.rsplit(":", 2)
    if name == point and int(want_rank) == rank and passes == int(hit):
        print(f"[rank {rank}] fault injected: SIGKILL at {point} (pass {hit})", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def install() -> None:
    """Installs :func:`fault_point` as the ``fault`` hook (``graphdist.plugins``), which comm's injection points call."""
    install_hook("fault", fault_point)


def _write_counts(directory: str, rank: int) -> None:
    path = os.path.join(directory, f"counts-{rank}-{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"rank": rank, "passes": _passes}, f)
    os.replace(path + ".tmp", path)
