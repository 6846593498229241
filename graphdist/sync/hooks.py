"""What a layer sends: communication hooks in the shape of PyTorch's DDP comm hooks.

A hook is ``hook(state, bucket) -> torch.futures.Future[Tensor]``: it starts the layer's
communication and returns at once; the future's value is the tensor to write back as the
layer's gradient. ``bucket`` offers what torch's ``GradBucket`` offers (``buffer()``,
``index()``, ``parameters()``, ``gradients()``, ``is_last()``), so the same hook registers on
torch DDP (``graphdist.sync.ddp``); a :class:`Bucket` from ``LayerwiseSync`` also carries the
layer's ``name`` and its owning ``modules``. New behaviour comes by wrapping a hook (a
compression wrapper encodes the buffer, calls the inner hook, decodes the future's value),
not by subclassing. Hooks get their handles from ``graphdist.comm``, never from
``torch.distributed``.

Today's hook is :func:`seed_weighted_allreduce`: each rank's gradient is a mean over its
``n_r`` seeds; it is scaled by ``n_r / N`` (``N = sum_r n_r``, one async all-reduce per step
issued in ``SeedWeights.begin_step``) and summed, so uneven batch shares give the exact
global mean; a rank with no seeds contributes zeros.

Example:
    >>> import torch
    >>> from graphdist.testing import one_rank_group
    >>> with one_rank_group():
    ...     state = AllreduceState()
    ...     state.weights.begin_step(4)
    ...     bucket = Bucket(0, "fc", [], torch.ones(3), is_last_bucket=True)
    ...     out = seed_weighted_allreduce(state, bucket).wait()
    >>> out.tolist()
    [1.0, 1.0, 1.0]
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch import nn

from graphdist import comm

logger = logging.getLogger(__name__)

# A hook: (state, bucket) -> Future[Tensor]. Not annotated further on purpose: DDP's
# register_comm_hook compares the annotations with dist.GradBucket / Future[Tensor].
CommHook = Callable[[Any, Any], torch.futures.Future]


@dataclass
class Bucket:
    """One layer's flattened gradients, as a hook sees them (a superset of torch's ``GradBucket``).

    Attributes:
        position: the layer's place in launch order (``index()``).
        name: the layer's name (``convs.0.lin_l``).
        params: its parameters, in flattening order.
        flat: the gradients, concatenated (``buffer()``).
        modules: the module(s) owning the parameters (e.g. to capture a Linear's input).
        is_last_bucket: the last bucket of the step.
    """

    position: int
    name: str
    params: list[nn.Parameter]
    flat: torch.Tensor
    modules: tuple[nn.Module, ...] = ()
    is_last_bucket: bool = False

    def buffer(self) -> torch.Tensor:
        return self.flat

    def set_buffer(self, tensor: torch.Tensor) -> None:
        self.flat = tensor

    def index(self) -> int:
        return self.position

    def parameters(self) -> list[nn.Parameter]:
        return list(self.params)

    def gradients(self) -> list[torch.Tensor]:
        """Views of ``buffer()``, one per parameter, shaped like it."""
        out, offset = [], 0
        for p in self.params:
            out.append(self.flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        return out

    def is_last(self) -> bool:
        return self.is_last_bucket


class SeedWeights:
    """This step's seed counts: ``n_r`` on this rank and ``N`` over all (one async all-reduce per step).

    Args:
        group: process group of the count.
        tag: byte-counter tag.
        normalize: scale each rank's gradient by its share ``n_r / N`` (its loss is a mean over its
            own seeds: mini-batch training). False: sum the gradients as they are (each rank's loss
            is already its part of one global mean, as in full-graph training, where halo
            gradients cross ranks and a per-rank share would weigh them wrongly).

    The same all-reduce carries one flag: a rank that calls :meth:`ask` before a step makes :meth:`asked` true on
    every rank once the step's count has landed (the trainer's time-based checkpoints ride on it, so that
    every rank saves after the same step without a collective of their own).

    Example:
        >>> w = SeedWeights()
        >>> w.begin_step(5)  # no process group: N = n_r
        >>> w.total(), w.scale(), SeedWeights(normalize=False).scale()
        (5, 1.0, 1.0)
        >>> w.ask(True); w.begin_step(3); w.asked()
        True
    """

    def __init__(self, group: Any = None, tag: str = "grad", normalize: bool = True) -> None:
        self.group, self.tag, self.normalize = group, tag, bool(normalize)
        self.num_seeds = 0
        self._total = 0
        self._count: Optional[torch.Tensor] = None
        self._handle: Optional[comm.Handle] = None
        self._ask, self._asked = False, False
        # Time this step blocked on the peers' counts (they had not started this step, or, for
        # SACP's rows, ended its forward yet). Backward waits here (the first layer's hook needs
        # N), so a fast rank's wait for a slow one lands inside backward; the trainer subtracts it
        # from the rank's own work (the rebalancer's busy time).
        self.wait_s = 0.0

    def begin_step(self, num_seeds: int) -> None:
        """Records ``n_r`` and starts the sum over ranks (before backward, so it has landed when needed)."""
        if num_seeds < 0:
            raise ValueError(f"Expected num_seeds >= 0 (got {num_seeds})")
        self.num_seeds = self._total = int(num_seeds)
        self._handle = None
        self.wait_s = 0.0
        self._asked, self._ask = self._ask, False
        if comm.is_initialized() and comm.get_world_size() > 1:
            self._count = torch.tensor([float(num_seeds), float(self._asked)], dtype=torch.float64)
            self._handle = comm.all_reduce_async(self._count, group=self.group, tag=self.tag)

    def ask(self, flag: bool = True) -> None:
        """Raises (or lowers) this rank's flag for the next step's count (:meth:`asked`)."""
        self._ask = bool(flag)

    def asked(self) -> bool:
        """Whether any rank asked before this step (waits for the step's count, as :meth:`total` does)."""
        self.total()
        return self._asked

    def total(self) -> int:
        """``N``: the seeds of this step over all ranks (waits for the count once)."""
        if self._handle is not None:
            self._timed_wait(self._handle)
            self._total = int(round(float(self._count[0])))
            self._asked = bool(self._count[1] > 0)
            self._handle = None
        return self._total

    def _timed_wait(self, handle: comm.Handle) -> None:
        """Waits for ``handle``, adding how long it blocked to ``wait_s``."""
        t0 = time.perf_counter()
        handle.wait()
        self.wait_s += time.perf_counter() - t0

    def scale(self) -> float:
        """``n_r / N``: this rank's share of the mean (0.0 when this step has no seeds anywhere); 1.0 unnormalized."""
        if not self.normalize:
            return 1.0
        total = self.total()
        return self.num_seeds / total if total > 0 else 0.0


@dataclass
class AllreduceState:
    """State of :func:`seed_weighted_allreduce`, grouped by how often it is changed.

    Attributes:
        algorithm: the allreduce algorithm (``graphdist.comm.algorithms``); default the ring.
        group: process group (None: the default group).
        tag: byte-counter tag of the gradient traffic.
        weights: this step's seed counts (set each step by the sync).
    """

    # tuned often
    algorithm: Optional[comm.AllreduceAlgorithm] = None
    # tuned seldom
    group: Any = None
    tag: str = "grad"
    # internal
    weights: SeedWeights = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.algorithm is None:
            self.algorithm = comm.allreduce_algorithm("ring")
        if self.weights is None:
            self.weights = SeedWeights(self.group, self.tag)

    @classmethod
    def create(cls, algorithm: Optional[comm.AllreduceAlgorithm] = None, group: Any = None, tag: str = "grad",
               seed_weighted: bool = True) -> "AllreduceState":
        """A state whose weights average by seed share (``seed_weighted``) or sum."""
        return cls(algorithm, group, tag, SeedWeights(group, tag, normalize=seed_weighted))


def seed_weighted_allreduce(state: AllreduceState, bucket):  # noqa: ANN001, ANN201 - see CommHook
    """``sum_r (n_r / N) * grad_r`` over ranks: the mean gradient over every seed of the step.

    Never blocks on the gradient traffic (the seed count was issued at ``begin_step`` and has
    normally landed long before backward reaches the first layer).

    Args:
        state: an :class:`AllreduceState`.
        bucket: a :class:`Bucket` or torch's ``GradBucket``; its buffer is scaled in place.

    Returns:
        A future of the summed buffer.
    """
    buf = bucket.buffer()
    scale = state.weights.scale()
    if scale == 0.0:
        buf.zero_()  # no seeds here: this rank's "mean" gradient may be nan; contribute nothing
    elif scale != 1.0:
        buf.mul_(scale)
    return state.algorithm(buf, state.group, state.tag).future()


__all__ = ["AllreduceState", "Bucket", "CommHook", "SeedWeights", "seed_weighted_allreduce"]
