"""``Strategy``: what one worker does to train, behind the one loop in ``trainers/run.py``.

A strategy is set up from a :class:`WorkerContext` (rank, config, partition directory, plan,
device, the user's model) and answers a few calls: ``train_epoch(epoch) -> EpochStats``,
``evaluate()``, ``predict()``, ``state_dict()`` / ``load_state_dict()`` for whatever a resume
needs beyond model and optimizer, and ``close()``. The loop owns epochs, metrics,
checkpoints, plots and resume; a strategy owns how a step trains. Who does what is the
``Plan`` in force (``Strategy.plan``): the loop may hand a strategy a new one
(``apply_plan``: the start-up profiler's, through ``probe_target``), and so may the
strategy's own rebalancer, at a step every rank agrees on; the checkpoint holds it. Strategies register under
their ``--strategy`` name; the CLI's choices come from the registry.

Example:
    >>> sorted(STRATEGIES)
    ['aggregation', 'fullgraph', 'minibatch']
    >>> strategy_class("minibatch").__name__
    'MinibatchStrategy'
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Protocol, Sequence

from graphdist.options import STRATEGIES, TASKS, StrategySpec

if TYPE_CHECKING:  # typing only: importing this module stays cheap (config.py reads STRATEGIES)
    import torch

    from graphdist.comm.topology import Topology
    from graphdist.config import TrainConfig
    from graphdist.rundir import RunDir
    from graphdist.trainers.probes import ProbeTarget
    from partition.handle import PartitionDir
    from placement.plan import Plan

# The strategies and tasks, and what each reads, are declared in ``graphdist.options`` (a floor
# below the config, which checks options against them); ``trainers/tasks.py`` implements the tasks.


@dataclass(frozen=True)
class WorkerContext:
    """What a strategy is built from.

    Attributes:
        rank, world_size: this worker and the job's size.
        cfg: the resolved config.
        partitions: the partition directory, opened once (``partition.handle.PartitionDir``).
        plan: who holds what (parts, device, batch share per rank).
        topology: which ranks share a host (None: unknown).
        model: the user's model, or None to build ``cfg.model``.
        run_dir: the run directory (``graphdist.rundir.RunDir``: caches such as the placement profile), or None.
        decisions: what a timed or measured choice decided at the run's start (``--allreduce auto``,
            ``--compress auto``, profiled start shares), by name. Saved in every checkpoint; a resumed
            run starts with the saved ones and reuses them instead of measuring again, so it is the
            run it continues whatever the load of the machine it resumes on.
    """

    rank: int
    world_size: int
    cfg: "TrainConfig"
    partitions: "PartitionDir"
    plan: "Plan"
    topology: Optional["Topology"] = None
    model: Optional["torch.nn.Module"] = None
    run_dir: Optional["RunDir"] = None
    decisions: dict[str, Any] = field(default_factory=dict)


@dataclass
class EpochStats:
    """What one epoch measured on this rank; the loop reduces it over ranks.

    Attributes:
        loss_sum: sum over seeds of the loss (mean = ``loss_sum / seeds``).
        seeds: seeds trained on.
        correct: seeds whose prediction was right.
        steps: optimizer steps taken.
        time_s: wall time of the epoch.
        sample_wait_s, compute_s, comm_exposed_s: where the time went.
        sync: the gradient sync's totals (``SyncSummary.as_list()`` order), summed over ranks.
        extras: strategy-specific numbers for the metrics record, averaged over ranks (e.g. a
            cache hit rate).
        per_rank: values recorded as one list entry per rank (batch share, busy and idle time, SACP bytes
            per layer and scheme).
        step_losses: this rank's mean loss of each optimizer step, in order (per-step scalars; not
            reduced over ranks).
    """

    loss_sum: float = 0.0
    seeds: int = 0
    correct: int = 0
    steps: int = 0
    time_s: float = 0.0
    sample_wait_s: float = 0.0
    compute_s: float = 0.0
    comm_exposed_s: float = 0.0
    sync: list[float] = field(default_factory=list)
    extras: dict[str, float] = field(default_factory=dict)
    per_rank: dict[str, Any] = field(default_factory=dict)
    step_losses: list[float] = field(default_factory=list)


@dataclass
class Predictions:
    """This rank's share of ``predict()``: original node ids, logits, last hidden layer."""

    orig_ids: "torch.Tensor"
    logits: "torch.Tensor"
    embeddings: "torch.Tensor"


class Progress(Protocol):
    """Where an epoch reports its progress (``graphdist.console.EpochProgress``: a bar or log lines)."""

    def advance(self, step: int) -> None:
        """``step`` steps of the epoch are done (every step; reads nothing from the device)."""

    def report(self, step: int, line: str, loss: Optional[float] = None, seeds_per_s: Optional[float] = None) -> None:
        """Every ``--log-interval`` steps: the progress line, and the numbers a bar shows."""


class Strategy(abc.ABC):
    """One worker's way of training. Subclasses set ``model`` and ``optimizer`` in ``__init__``.

    Args:
        ctx: the worker context. Construction is collective: every rank builds its strategy
            at the same point (sources exchange caches, the model is broadcast).
    """

    name: str = ""
    # Whether batch shares may move during the run (the profiler's start shares, a rebalancer's):
    # where they cannot, the plan's shares are what the strategy trains at, whatever a checkpoint says.
    moves_shares: bool = False

    def __init__(self, ctx: WorkerContext) -> None:
        from graphdist.trainers.tasks import make_task

        self.ctx = ctx
        self.model: "torch.nn.Module"
        self.optimizer: "torch.optim.Optimizer"
        # --precision fp16's loss scalers by name (``precision.loss_scaler``; disabled ones otherwise),
        # each rank's in its checkpoint state.
        self.scalers: dict[str, Any] = {}
        self.task = make_task(ctx.cfg.task, ctx.partitions.meta, ctx.cfg)  # the loss and the metrics

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps an epoch makes on every rank; 0 where a strategy cannot say ahead."""
        return 0

    @property
    def plan(self) -> "Plan":
        """The plan in force (who holds which parts, with which batch share); the checkpoint holds it."""
        return self.ctx.plan

    def apply_plan(self, plan: "Plan", step: int = 0) -> None:
        """Trains under ``plan`` from the batch after ``step`` on (0: the next epoch's start).

        A strategy whose batch shares cannot move (``moves_shares`` False) refuses a plan other than its own.
        """
        if plan != self.plan:
            raise ValueError(f"--strategy {self.name} trains at its plan's batch shares {list(self.plan.shares)}; "
                             f"it cannot apply {list(plan.shares)}")

    def probe_target(self) -> Optional["ProbeTarget"]:
        """What the loop's start-up profiler times to choose batch shares (``trainers/probes.py``),
        or None: this strategy has no shares to choose."""
        return None

    def describe(self) -> list[tuple[str, str]]:
        """The start banner's ``strategy`` and ``sync`` rows: what this run does, in a few words each."""
        sync = getattr(self, "sync", None)
        if self.ctx.world_size == 1:
            return [("strategy", self.name), ("sync", "none: one worker")]
        words = [sync.describe()] if sync is not None else []
        if self.ctx.cfg.sync != self.ctx.decisions.get("sync", self.ctx.cfg.sync):
            why = self.ctx.decisions.get("sync_why")
            words.append(f"chosen by --sync {self.ctx.cfg.sync}" + (f" ({why})" if why else ""))
        compress = self.ctx.cfg.compress
        if compress == "auto":
            words.append(f"compress {self.ctx.decisions.get('compress', '?')} (auto)")
        elif compress != "none":
            words.append(f"compress {compress}")
        return [("strategy", self.name), ("sync", ", ".join(words))]

    @abc.abstractmethod
    def train_epoch(self, epoch: int, progress: Optional[Progress] = None) -> EpochStats:
        """Trains one epoch, telling ``progress`` (rank 0's; None elsewhere) how far it is."""

    @abc.abstractmethod
    def evaluate(self) -> dict[str, float]:
        """Metrics over all workers (collective), e.g. ``val_acc``, ``test_acc``."""

    @abc.abstractmethod
    def predict(self) -> Predictions:
        """This rank's nodes' outputs (collective)."""

    @classmethod
    def check(cls, cfg: "TrainConfig", meta: dict[str, Any], model: Optional["torch.nn.Module"] = None) -> None:
        """Refuses, before any worker starts, what this strategy cannot train (raises ``ValueError``).

        ``meta`` is the partition directory's ``meta.json``; ``model`` the user's model, if any.
        """

    @classmethod
    def planned_steps(cls, cfg: "TrainConfig", meta: dict[str, Any]) -> int:
        """Optimizer steps per epoch this strategy will make (before any worker starts; for the launcher's
        warning about runs too short to learn). Default: one per global batch of train nodes (of supervision
        edges in a link-prediction partition)."""
        from placement.assign import part_loads

        train = sum(part_loads(meta)[0]) if meta.get("parts") else 0
        steps = max(1, -(-train // max(1, cfg.batch_size)))
        return min(steps, cfg.max_steps) if cfg.max_steps else steps

    def state_dict(self) -> dict[str, Any]:
        """This rank's state a resume needs beyond model, optimizer and global RNGs."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`."""

    # Seeds of the epoch in progress trained before a mid-epoch checkpoint this run resumed from: the loop adds
    # them to that epoch's record (set by :meth:`resume_progress`, read once).
    carried_seeds: int = 0

    def resume_progress(self, progress: dict[str, Any]) -> None:
        """Trains only the seeds ``progress`` (a mid-epoch checkpoint's) had not, in its epoch. Strategies
        without mid-epoch checkpoints never get one (``--checkpoint-interval`` is minibatch's)."""
        raise ValueError(f"--strategy {self.name} cannot resume inside an epoch")

    def resized_state(self, fresh: dict[str, Any], saved: list[dict[str, Any]]) -> dict[str, Any]:
        """This rank's state when resuming on another worker count: ``fresh`` (its own, as built for the new
        formation, random streams reseeded: ``checkpoints.resume``) with what carries over from every saved
        rank's ``saved`` state. Default: nothing carries over (per-rank caches, residuals, shares reset)."""
        return fresh

    def close(self) -> None:
        """Releases hooks, threads and groups."""


def gradient_allreduce(ctx: WorkerContext, model: "torch.nn.Module", mode: Optional[str] = None) -> Any:
    """The allreduce algorithm ``--allreduce`` names, built for this job (collective: every rank, same point).

    Under ``--sync ddp`` (``mode``: the sync it serves, resolved; default ``--sync``) the backend's ring,
    whatever ``--allreduce`` says (DDP is the comparison point: torch's own allreduce); a topology-aware
    choice there warns once. ``auto`` is timed
    on a probe the size of the model's largest parameter tensor (one layer's gradient, roughly).
    """
    import logging
    import warnings

    from graphdist import comm
    from graphdist.sync.modes import SYNC_MODES
    from graphdist.sync.tables import dense_parameters

    name = ctx.cfg.allreduce
    mode = mode if mode is not None else ctx.cfg.sync
    if SYNC_MODES[mode].owns_allreduce:
        if name not in ("auto", "ring"):
            warnings.warn(f"--allreduce {name} is ignored under --sync {mode} (it keeps its own allreduce); "
                          f"use --sync dwbp to sum gradients with it", stacklevel=2)
        name = "ring"
    kwargs: dict[str, Any] = {}
    if name == "auto" and "allreduce" in ctx.decisions:  # decided at the run's start: not timed again
        name = ctx.decisions["allreduce"]
    elif name == "auto":
        largest = max((p.numel() * p.element_size() for p in dense_parameters(model)), default=4)
        kwargs["probe_bytes"] = int(min(max(largest, 1 << 16), 16 << 20))
    algorithm = comm.allreduce_algorithm(name, ctx.topology, **kwargs)
    if name == "auto":
        ctx.decisions["allreduce"] = algorithm.chosen
    if comm.is_main_process():
        describe = getattr(algorithm, "describe", None)
        logging.getLogger(__name__).debug("allreduce: %s", describe() if describe else repr(algorithm))
    return algorithm


def adam(params: Any, lr: float, weight_decay: float = 0.0, shard: Any = None) -> "torch.optim.Adam":
    """The optimizer every strategy trains with (and the probes time): Adam on torch's fused kernel
    where it runs (float parameters on one CPU or CUDA device), else its default.

    Embedding tables (``row_wise``) step lazily, row by row (``trainers/row_adam.py``); ``shard`` (a
    ``RowShard``) spreads their per-row Adam state over the ranks of a gradient-synced job.

    The fused step is one pass over each tensor where the default issues a dozen ``foreach``
    calls: a 60,000-parameter GCN's step took 0.14 ms with it and 0.05 ms fused on one CPU thread.
    The arithmetic is Adam's; the two differ in the last bits of float32 rounding.

    Example:
        >>> import torch
        >>> adam([torch.nn.Parameter(torch.zeros(3))], lr=0.01).defaults["fused"]
        True
    """
    import torch

    from graphdist.trainers.row_adam import RowAdam, is_row_wise

    params = list(params)
    devices = {p.device for p in params}
    fused = (bool(params) and len(devices) == 1 and next(iter(devices)).type in ("cpu", "cuda")
             and all(p.dtype.is_floating_point for p in params))
    tables = [p for p in params if is_row_wise(p)]
    if tables:  # a typed graph's embedding tables: only the rows a step touched move (trainers/row_adam.py)
        dense = [p for p in params if not is_row_wise(p)]
        return RowAdam([{"params": dense}, {"params": tables, "rows": True}], shard=shard, lr=lr,
                       weight_decay=weight_decay, fused=fused or None)
    return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=fused or None)


def sync_options(cfg: "TrainConfig", mode: Optional[str] = None) -> dict[str, Any]:
    """The ``make_sync`` keywords ``--compress``, ``--sacp`` and ``--sacp-override`` give under sync ``mode``
    (resolved; default ``--sync``).

    Example:
        >>> from graphdist.config import TrainConfig
        >>> sync_options(TrainConfig(sync="dwbp"))
        {'compress': 'none', 'sacp': True, 'sacp_overrides': {}}
    """
    from graphdist.sync.modes import SYNC_MODES, parse_sacp_overrides

    mode = mode if mode is not None else cfg.sync
    sacp = cfg.sacp == "on" or (cfg.sacp == "auto" and SYNC_MODES[mode].layerwise and not SYNC_MODES[mode].candidates)
    return {"compress": cfg.compress, "sacp": sacp, "sacp_overrides": parse_sacp_overrides(cfg.sacp_override or "")}


def resolve_sync(ctx: WorkerContext, probe: Optional[Callable[[Sequence[str]], dict[str, float]]] = None) -> str:
    """The sync mode this job trains with: ``--sync``, or what ``--sync auto`` chose (``graphdist.sync.choice``).

    Decided once, at the first call (collective: every rank, same point), and kept in ``ctx.decisions``:
    later syncs of the job and a resumed run reuse it. Across hosts ``probe(modes)`` (a strategy's probe
    steps: ``trainers/probes.time_syncs``) times each candidate; without one, per-layer sync stays.
    """
    import logging

    from graphdist import comm
    from graphdist.sync.choice import able_modes, choose_sync
    from graphdist.sync.modes import SYNC_MODES

    cfg = ctx.cfg
    if not SYNC_MODES[cfg.sync].candidates:
        return cfg.sync
    if "sync" in ctx.decisions:  # decided at the run's start: not measured again
        return ctx.decisions["sync"]
    able = able_modes(cfg.sync, cfg.compress, cfg.sacp, cfg.sacp_override, cfg.allreduce, cfg.devices)
    one_host = ctx.topology is None or len(ctx.topology.hosts) == 1
    step_s = probe(able) if len(able) > 1 and not one_host and probe is not None else None
    choice = choose_sync(able, one_host, step_s)
    ctx.decisions["sync"], ctx.decisions["sync_why"] = choice.chosen, choice.reason  # the banner says why
    if step_s:  # timed: measured again if the step time moves (recheck_sync)
        ctx.decisions["sync_timed"] = True
    if comm.is_main_process():
        logging.getLogger("graphdist").debug(choice.describe())
    return choice.chosen


def recheck_sync(ctx: WorkerContext, step_s: float, probe: Optional[Callable[[Sequence[str]], dict[str, float]]]
                 ) -> Optional[str]:
    """``--sync auto``'s timed choice measured again if the step time moved (``graphdist.sync.choice``): after an
    epoch whose slowest rank's mean step is ``step_s`` (the same number on every rank). The first such epoch
    sets the reference; one that differs from it by more than ``RECHECK_FACTOR`` probes the candidates again.

    Collective when it probes (every rank, same point). Returns the mode chosen when it probed (maybe the same
    one), else None; the decisions (kept in the checkpoint) record it and drop the reference: the next epoch
    the caller reads (after a change, it skips one as warm-up) sets a new one.
    """
    from graphdist.sync.choice import able_modes, choose_sync, needs_recheck

    decisions, cfg = ctx.decisions, ctx.cfg
    if not decisions.get("sync_timed") or probe is None:
        return None
    reference = decisions.get("sync_ref_step_s")
    if reference is None:
        decisions["sync_ref_step_s"] = step_s
        return None
    if not needs_recheck(reference, step_s):
        return None
    able = able_modes(cfg.sync, cfg.compress, cfg.sacp, cfg.sacp_override, cfg.allreduce, cfg.devices)
    choice = choose_sync(able, one_host=False, step_s=probe(able))
    decisions["sync"] = choice.chosen
    decisions["sync_why"] = (f"checked again after the step moved from {1e3 * reference:.1f} to {1e3 * step_s:.1f} "
                             f"ms: {choice.reason}")
    del decisions["sync_ref_step_s"]
    return choice.chosen


def job_sync(ctx: WorkerContext, model: "torch.nn.Module", algorithm: Any = None,
             probe: Optional[Callable[[Sequence[str]], dict[str, float]]] = None, mode: Optional[str] = None,
             **kwargs: Any) -> Any:
    """The job's gradient sync around ``model`` (``make_sync`` with the job's sync mode, :func:`resolve_sync`,
    and :func:`sync_options`), over ``algorithm`` (default: :func:`gradient_allreduce`'s). Collective:
    every rank, same point. ``probe``: :func:`resolve_sync`'s; ``mode``: another mode than the job's
    (``--sync auto``'s probes).

    ``--compress auto`` is resolved once, by timing, and kept in ``ctx.decisions``; later syncs of
    the job (the profiler's, aggregation's correction steps) and a resumed run reuse that choice.
    """
    from graphdist.sync import make_sync

    mode = mode if mode is not None else resolve_sync(ctx, probe)
    algorithm = algorithm if algorithm is not None else gradient_allreduce(ctx, model, mode)
    options = sync_options(ctx.cfg, mode)
    if options["compress"] == "auto":
        if "compress" not in ctx.decisions:
            from graphdist.sync.factory import resolve_compression

            ctx.decisions["compress"] = resolve_compression(mode, model, algorithm)
        options["compress"] = ctx.decisions["compress"]
    return make_sync(mode, model, algorithm=algorithm, **options, **kwargs)


def strategy_class(name: str) -> type[Strategy]:
    """The class registered as ``name`` (imported on first use).

    Raises:
        ValueError: an unknown name, listing the registered ones.
    """
    if name not in STRATEGIES:
        raise ValueError(f"--strategy must be one of {', '.join(STRATEGIES)} (got {name!r})")
    module, cls = STRATEGIES[name].target.split(":")
    return getattr(importlib.import_module(module), cls)


def register_strategy(name: str, target: str, reads: Iterable[str] = ()) -> None:
    """Registers ``"module:Class"`` under ``name`` (a user's own strategy; spawned workers import it), with
    the strategy-specific options it reads (``graphdist.options.StrategySpec``).

    Example:
        >>> register_strategy("minibatch", "graphdist.trainers.minibatch:MinibatchStrategy",
        ...                   reads=STRATEGIES["minibatch"].reads)
    """
    if ":" not in target:
        raise ValueError(f"Expected 'module:Class' (got {target!r})")
    STRATEGIES[name] = StrategySpec(target, frozenset(reads))


__all__ = ["EpochStats", "Predictions", "Progress", "STRATEGIES", "Strategy", "TASKS", "WorkerContext",
           "gradient_allreduce", "job_sync", "recheck_sync", "register_strategy", "resolve_sync", "strategy_class",
           "sync_options"]
