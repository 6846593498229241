"""Fault injection for tests: a model wrapper that fails on one rank at a chosen step.

It lives in an importable module (not a test file) because spawned workers
must unpickle it.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import torch


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
