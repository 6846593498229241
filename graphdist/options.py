"""What each strategy and task is, and which options it reads: declared once, read by the config's checks,
the CLI's choices and the trainers' registry.

An option a run would not read is refused when it is *given* (a flag, a ``GRAPHDIST_<NAME>``
variable, a ``--config`` key or an API keyword with a value other than the default) instead of
doing nothing in silence: ``--staleness 1`` with ``--strategy minibatch`` is one line naming what
``--staleness`` applies to. The sync modes declare theirs beside their names
(``graphdist.sync.modes.SYNC_MODES``). An option no declaration names is read by every run.

Imports nothing of graphdist and no torch: ``--help`` and the config's checks stay fast, and the
config (a floor below the trainers) reads the registry without importing the trainers.

Example:
    >>> STRATEGIES["fullgraph"].reads >= {"staleness", "smoothing"}
    True
    >>> sorted(readers("staleness"))
    ['--strategy fullgraph']
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StrategySpec:
    """A training strategy: where its class lives and what it reads beyond the options every run reads.

    Attributes:
        target: ``"module:Class"``, imported on first use (``trainers.base.strategy_class``).
        reads: the strategy-specific options (field names) it reads.
        syncs_when: the option that turns its gradient sync on (``--correction-steps`` for aggregation,
            whose local steps sync nothing); None: every step syncs gradients, so ``--sync`` and the
            options its mode reads apply.
        summary: one line for ``--help``.
    """

    target: str
    reads: frozenset[str] = field(default_factory=frozenset)
    syncs_when: str | None = None
    summary: str = ""


@dataclass(frozen=True)
class TaskSpec:
    """What a run learns: the options only this task reads, those its strategy would read but this task
    does not, and the strategies that can train it."""

    reads: frozenset[str] = field(default_factory=frozenset)
    strategies: frozenset[str] = field(default_factory=frozenset)  # empty: every strategy
    summary: str = ""
    drops: frozenset[str] = field(default_factory=frozenset)


# Sampled mini-batches: fan-outs, the remote-feature cache, the prefetch thread.
_SAMPLED = frozenset({"fanouts", "cache_rows", "prefetch"})

# name -> spec. The one declaration of the strategy names (``register_strategy`` adds a user's).
STRATEGIES: dict[str, StrategySpec] = {
    "minibatch": StrategySpec(
        "graphdist.trainers.minibatch:MinibatchStrategy",
        _SAMPLED | {"replicate", "placement", "rebalance_every", "rebalance_eps"},
        summary="sampled mini-batches of each worker's seeds, remote neighbourhoods fetched, gradients synced"),
    "fullgraph": StrategySpec(
        "graphdist.trainers.fullgraph:FullGraphStrategy",
        frozenset({"staleness", "smoothing", "boundary_sample", "max_memory", "placement"}),
        summary="each worker's whole part per step, halo embeddings exchanged per layer"),
    "aggregation": StrategySpec(
        "graphdist.trainers.aggregation:AggregationStrategy",
        _SAMPLED | {"avg_every", "avg_seconds", "avg_optimizer", "avg_overlap", "correction_steps", "allreduce"},
        syncs_when="correction_steps", summary="each worker trains on its own part alone; parameters averaged"),
}

# name -> spec. The one declaration of the task names.
TASKS: dict[str, TaskSpec] = {
    "node": TaskSpec(summary="node classification (single or multi-label, as the data has it)"),
    "link": TaskSpec(frozenset({"edge_split", "eval_negatives", "num_negatives", "neg_sampling", "decoder",
                                "hits_k"}), frozenset({"minibatch"}), summary="link prediction on held-out edges",
                     # a link batch is edges of the worker's own parts: no seeds migrate between workers
                     drops=frozenset({"rebalance_every", "rebalance_eps"})),
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


__all__ = ["NEEDS", "REPLACED_BY", "STRATEGIES", "StrategySpec", "TASKS", "TaskSpec", "readers", "scoped_options"]
