"""What each strategy and task is, and which options it reads: declared once, read by the config's checks,
the CLI's choices and the trainers' registry.

An option a run would not read is refused when it is *given* (a flag, a ``GRAPHDIST_<NAME>``
variable, a ``--config`` key or an API keyword with a value other than the default) instead of
doing nothing in silence: ``--staleness 1`` with ``--strategy minibatch`` is one line naming what
``--staleness`` applies to. The sync modes declare theirs beside their names
(``graphdist.sync.modes.SYNC_MODES``). An option no declaration names is read by every run.

The strategies' own options are their config sections (``FullGraphSection``,
``AggregationSection``), declared and checked here, beside the strategies, because the config (a
floor below the trainers) composes them without importing the trainers.

Imports ``graphdist.section`` only and no torch: ``--help`` and the config's checks stay fast.

Example:
    >>> STRATEGIES["fullgraph"].reads >= {"staleness", "smoothing"}
    True
    >>> sorted(readers("staleness"))
    ['--strategy fullgraph']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from graphdist.section import Section, fail


@dataclass(frozen=True)
class FullGraphSection(Section):
    """``--strategy fullgraph``'s options: the halo exchange's staleness and sampling, the memory check.

    Example:
        >>> FullGraphSection(staleness=1, boundary_sample=0.5)
        Traceback (most recent call last):
        ...
        graphdist.section.ConfigError: --boundary-sample < 1 needs --staleness 0 (stale buffers assume every \
boundary row) (got 0.5)
    """

    staleness: int = 0  # 0: exact halo exchange; 1: wait-free, halo embeddings/gradients one step stale
    smoothing: float = 0.0  # PipeGCN's g for stale buffers: h <- g*h_old + (1-g)*h_new (0: none)
    boundary_sample: float = 1.0  # BNS-GCN: share of boundary nodes kept each epoch (1: all, exact)
    max_memory: Optional[float] = None  # GiB per worker for the memory check; None: machine memory / local workers

    def check(self) -> None:
        if self.staleness not in (0, 1):
            raise fail("staleness", "must be 0 (exact) or 1 (wait-free, one step stale)", self.staleness)
        if not 0.0 <= self.smoothing < 1.0:
            raise fail("smoothing", "must lie in [0, 1)", self.smoothing)
        if not 0.0 < self.boundary_sample <= 1.0:
            raise fail("boundary-sample", "must lie in (0, 1]", self.boundary_sample)
        if self.boundary_sample < 1.0 and self.staleness:
            raise fail("boundary-sample", "< 1 needs {0} (stale buffers assume every boundary row)",
                       self.boundary_sample, "", ("staleness", 0))
        if self.max_memory is not None and self.max_memory <= 0:
            raise fail("max-memory", "must be > 0 GiB", self.max_memory)


@dataclass(frozen=True)
class AggregationSection(Section):
    """``--strategy aggregation``'s options: when parameters are averaged, and LLCG's correction.

    Example:
        >>> AggregationSection(avg_every=0)
        Traceback (most recent call last):
        ...
        graphdist.section.ConfigError: --avg-every must be >= 1 step (got 0)
    """

    avg_every: int = 10  # steps between parameter averages (and always at the end of an epoch)
    avg_seconds: Optional[float] = None  # average every T seconds instead (ranks agree on the step)
    avg_optimizer: bool = False  # average Adam's moments too (default: optimizer state stays local)
    # Land each mid-epoch average one step late, its all-reduce hidden behind that step (off: the
    # plain synchronous averaging the accuracy figures were first measured with)
    avg_overlap: bool = False
    correction_steps: int = 0  # LLCG: global mini-batch steps after each average (0: plain averaging)

    def check(self) -> None:
        if self.avg_every < 1:
            raise fail("avg-every", "must be >= 1 step", self.avg_every)
        if self.avg_seconds is not None and self.avg_seconds <= 0:
            raise fail("avg-seconds", "must be > 0 seconds", self.avg_seconds)
        if self.correction_steps < 0:
            raise fail("correction-steps", "must be >= 0", self.correction_steps)
        if self.avg_overlap and self.correction_steps:
            raise fail("avg-overlap", "lands each average one step late, but {0} must start from the averaged "
                       "model", None, "use one of them", ("correction_steps", self.correction_steps))


@dataclass(frozen=True)
class StrategySpec:
    """A training strategy: where its class lives and what it reads beyond the options every run reads.

    Attributes:
        target: ``"module:Class"``, imported on first use (``trainers.base.strategy_class``).
        reads: the strategy-specific options (field names) it reads: its own section's and others'.
        section: its own options (a config section only this strategy reads), if it has any.
        syncs_when: the option that turns its gradient sync on (``--correction-steps`` for aggregation,
            whose local steps sync nothing); None: every step syncs gradients, so ``--sync`` and the
            options its mode reads apply.
        summary: one line for ``--help``.
        cost_model: how the simulator predicts its epoch (a key of ``placement.simulator.COST_MODELS``);
            None: not modelled (graphdist-plan leaves it out).
        variants: the settings of its own options graphdist-plan compares, each ``(flags, settings)``.
        batched: it trains on batches of ``--batch-size`` seeds split by batch share (not whole parts).
    """

    target: str
    reads: frozenset[str] = field(default_factory=frozenset)
    syncs_when: str | None = None
    summary: str = ""
    section: Optional[type[Section]] = None
    cost_model: Optional[str] = None
    variants: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = (("", ()),)
    batched: bool = True

    def __post_init__(self) -> None:
        if self.section is not None:  # its own options are read by it, whatever else it declares
            object.__setattr__(self, "reads", self.reads | frozenset(self.section.names()))


@dataclass(frozen=True)
class TaskSpec:
    """What a run learns: the options only this task reads, those its strategy would read but this task
    does not, and the strategies that can train it."""

    reads: frozenset[str] = field(default_factory=frozenset)
    strategies: frozenset[str] = field(default_factory=frozenset)  # empty: every strategy
    summary: str = ""
    drops: frozenset[str] = field(default_factory=frozenset)


# Sampled mini-batches: the sampler, its fan-outs, the remote-feature cache, the prefetch thread, the loader processes.
_SAMPLED = frozenset({"sampler", "fanouts", "cache_rows", "prefetch", "loaders"})

# --sample-on: where a worker samples (graphdist/trainers/device_sampling.py).
SAMPLE_ON = ("auto", "cpu", "device")

# --sampler name -> what a batch is (trainers/samplers.py builds the loaders).
SAMPLERS: dict[str, str] = {
    "neighbor": "each seed's neighbourhood sampled with --fanouts, across parts",
    "cluster": "ClusterGCN: the subgraph induced by a few METIS clusters of the worker's own part",
}

# name -> spec. The one declaration of the strategy names (``register_strategy`` adds a user's).
STRATEGIES: dict[str, StrategySpec] = {
    "minibatch": StrategySpec(
        "graphdist.trainers.minibatch:MinibatchStrategy",
        _SAMPLED | {"replicate", "placement", "rebalance_every", "rebalance_eps", "checkpoint_interval", "sample_on"},
        cost_model="minibatch",
        summary="sampled mini-batches of each worker's seeds, remote neighbourhoods fetched, gradients synced"),
    "fullgraph": StrategySpec(
        "graphdist.trainers.fullgraph:FullGraphStrategy",
        frozenset({"placement"}), section=FullGraphSection, cost_model="fullgraph", batched=False,
        variants=(("--staleness 0", (("staleness", 0),)), ("--staleness 1", (("staleness", 1),))),
        summary="each worker's whole part per step, halo embeddings exchanged per layer"),
    "aggregation": StrategySpec(
        "graphdist.trainers.aggregation:AggregationStrategy",
        _SAMPLED | {"allreduce"}, section=AggregationSection, cost_model="aggregation",
        variants=(("", ()), ("--avg-overlap", (("avg_overlap", True),))),
        syncs_when="correction_steps", summary="each worker trains on its own part alone; parameters averaged"),
}

# name -> spec. The one declaration of the task names.
TASKS: dict[str, TaskSpec] = {
    "node": TaskSpec(summary="node classification (single or multi-label, as the data has it)"),
    "link": TaskSpec(frozenset({"edge_split", "eval_negatives", "num_negatives", "neg_sampling", "decoder",
                                "hits_k"}), frozenset({"minibatch"}), summary="link prediction on held-out edges",
                     # a link batch is edges of the worker's own parts: no seeds migrate between workers, and
                     # it is drawn by the edge sampler (trainers/link.py), whatever --sampler says; a mid-epoch
                     # checkpoint records the seed nodes trained, not edges
                     drops=frozenset({"rebalance_every", "rebalance_eps", "sampler", "checkpoint_interval"})),
}


# option -> the option that must be set (non-zero) for it to be read: PipeGCN's smoothing blends stale
# buffers, which exist with --staleness 1 only.
NEEDS: dict[str, str] = {"smoothing": "staleness"}
# option -> the option that, set, replaces it: averaging every T seconds instead of every K steps.
REPLACED_BY: dict[str, str] = {"avg_every": "avg_seconds"}


def readers(name: str) -> list[str]:
    """Who reads option ``name``, as flags (``--strategy fullgraph``); empty: every run reads it."""
    out = [f"--strategy {s}" for s, spec in STRATEGIES.items() if name in spec.reads]
    out += [f"--task {t}" for t, spec in TASKS.items() if name in spec.reads]
    return out


def scoped_options() -> frozenset[str]:
    """The options some strategy or task reads and another does not."""
    return frozenset().union(*(s.reads for s in STRATEGIES.values()), *(t.reads for t in TASKS.values()))


__all__ = ["AggregationSection", "FullGraphSection", "NEEDS", "REPLACED_BY", "SAMPLE_ON", "SAMPLERS", "STRATEGIES", "StrategySpec", "TASKS", "TaskSpec", "readers", "scoped_options"]
