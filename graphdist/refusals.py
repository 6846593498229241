"""The refusal of options a run would not read.

``refuse_inapplicable`` refuses an option that was given but that the
run's strategy, task and sync mode do not read, from their declarations (``graphdist.options``,
``graphdist.sync.modes.SYNC_MODES``). ``graphdist.config`` validates with both and re-exports them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Iterable

from graphdist.options import NEEDS, REPLACED_BY, STRATEGIES, TASKS, scoped_options
from graphdist.section import ConfigError, fail  # noqa: F401 - re-exported
from graphdist.sync.modes import SYNC_MODES, SYNC_OPTIONS

if TYPE_CHECKING:
    from graphdist.config import TrainConfig


def read_options(cfg: "TrainConfig") -> frozenset[str]:
    """The scoped options (some runs read them, others not) that this run reads, from the declarations of
    its strategy, task and sync mode (``graphdist.options``, ``graphdist.sync.modes.SYNC_MODES``)."""
    strategy, task = STRATEGIES[cfg.strategy], TASKS[cfg.task]
    read = set(strategy.reads) | set(task.reads)
    if strategy.syncs_when is None or getattr(cfg, strategy.syncs_when):
        read |= {"sync", "compress"} | SYNC_MODES[cfg.sync].reads
    return frozenset(read - task.drops)


def scoped() -> frozenset[str]:
    """The options some runs read and others do not: only these can be refused as inapplicable."""
    return scoped_options() | SYNC_OPTIONS


def refuse_inapplicable(cfg: "TrainConfig", given: Iterable[str]) -> None:
    """Refuses an option that was given but that this run would not read (it would do nothing in silence).

    Args:
        given: the options named as a flag, a ``GRAPHDIST_<NAME>`` variable, or a ``--config`` key or API
            keyword with a value other than the default (a resumed run's own config.yaml gives none).

    Raises:
        ConfigError: the first such option (in field order), naming what it applies to and this run's setting.

    Example:
        >>> from graphdist.config import TrainConfig
        >>> refuse_inapplicable(TrainConfig(strategy="minibatch", staleness=1), {"staleness"})
        Traceback (most recent call last):
        ...
        graphdist.section.ConfigError: --staleness applies to --strategy fullgraph only (got 1); this run: --strategy minibatch
    """
    wanted = set(given) & scoped()
    if not wanted:
        return
    read = read_options(cfg)
    for name in (f.name for f in dataclasses.fields(cfg)):
        if name not in wanted:
            continue
        if name not in read:
            raise _inapplicable(cfg, name)
        if name in NEEDS and not getattr(cfg, NEEDS[name]):
            need = NEEDS[name]
            raise ConfigError(name, "applies only with {0}", getattr(cfg, name), "this run: {1}",
                              mentions=((need, 1), (need, getattr(cfg, need))))
        if name in REPLACED_BY and getattr(cfg, REPLACED_BY[name]) is not None:
            other = REPLACED_BY[name]
            raise ConfigError(name, "does nothing beside {0}, which replaces it; give one of them",
                              getattr(cfg, name), mentions=((other, getattr(cfg, other)),))


def _inapplicable(cfg: "TrainConfig", name: str) -> ConfigError:
    """The refusal of option ``name``, which this run does not read: who reads it, and this run's setting."""
    got = getattr(cfg, name)
    strategy = STRATEGIES[cfg.strategy]
    if name in TASKS[cfg.task].drops:
        others = [t for t, spec in TASKS.items() if name not in spec.drops]
        return ConfigError(name, "applies to " + " or ".join(f"{{{i}}}" for i in range(len(others))) + " only", got,
                           f"this run: {{{len(others)}}}", mentions=(*(("task", t) for t in others), ("task", cfg.task)))
    if name in SYNC_OPTIONS and name not in strategy.reads:
        if strategy.syncs_when is not None and not getattr(cfg, strategy.syncs_when):
            return ConfigError(name, "applies where gradients are synced: with {0} only when {1} is given", got,
                               "this run: {2}", mentions=(("strategy", cfg.strategy), (strategy.syncs_when, "N"),
                                                          (strategy.syncs_when, getattr(cfg, strategy.syncs_when))))
        modes = [m for m, mode in SYNC_MODES.items() if name in mode.reads]
        return ConfigError(name, "applies to " + " or ".join(f"{{{i}}}" for i in range(len(modes))) + " only", got,
                           f"this run: {{{len(modes)}}}", mentions=(*(("sync", m) for m in modes), ("sync", cfg.sync)))
    mentions = [("strategy", s) for s, spec in STRATEGIES.items() if name in spec.reads]
    mentions += [("task", t) for t, spec in TASKS.items() if name in spec.reads]
    own = ("strategy", cfg.strategy) if any(k == "strategy" for k, _ in mentions) else ("task", cfg.task)
    who = " or ".join(f"{{{i}}}" for i in range(len(mentions)))
    return ConfigError(name, f"applies to {who} only", got, f"this run: {{{len(mentions)}}}",
                       mentions=(*mentions, own))


def check_cluster(cfg: "TrainConfig") -> None:
    """What ClusterGCN batches, drawn from each worker's own part, cannot go with."""
    for name, refused, why in (("replicate", cfg.replicate != "none", "a cluster batch reads only the worker's own part"),
                               ("rebalance_every", cfg.rebalance_every != 0, "cluster batches are whole clusters of a "
                                "part, not seeds that can migrate"),
                               ("placement", cfg.placement == "profiled", "the profiler probes neighbour-sampled "
                                "batches"),
                               ("checkpoint_interval", cfg.checkpoint_interval is not None, "a mid-epoch checkpoint "
                                "records the seeds trained, and cluster batches are not seeds")):
        if refused:
            raise fail(name, f"cannot go with {{0}}: {why}", getattr(cfg, name), "", ("sampler", "cluster"))


def check_link(cfg: "TrainConfig") -> None:
    """What link prediction cannot be combined with."""
    able = sorted(TASKS["link"].strategies)
    if cfg.strategy not in able:
        raise fail("task", "link needs " + " or ".join(f"{{{i}}}" for i in range(len(able))) + " (the others train "
                    "node labels)", cfg.task, "", *(("strategy", s) for s in able))
    if cfg.rebalance_every:
        raise fail("rebalance-every", "applies to {0} only (link batches are edges of each worker's own parts, "
                    "which do not migrate)", cfg.rebalance_every, "", ("task", "node"))
    if cfg.placement == "profiled":
        raise fail("placement", "profiled probes node batches; with {0} use {1} (or auto)", cfg.placement, "",
                    ("task", "link"), ("placement", "equal"))


def check_sample_on(cfg: "TrainConfig") -> None:
    """What ``--sample-on device`` cannot go with: it samples from every node's CSR on the worker's device
    (``graphdist/trainers/device_sampling.py``)."""
    for refused, why, hint in ((cfg.strategy == "minibatch" and cfg.num_workers > 1 and cfg.replicate == "none",
                                "2+ workers sample across parts", ("replicate", "structure")),
                               (cfg.task == "link", "link prediction's batches are edges", ("sample_on", "cpu")),
                               (bool(cfg.loaders), "{1} feeds batches from the CPU", ("sample_on", "cpu"))):
        if refused:
            raise fail("sample-on", f"device needs batches sampled from local sources: {why}", cfg.sample_on,
                       "give {0}", hint, ("loaders", cfg.loaders))


__all__ = ["ConfigError", "check_cluster", "check_link", "check_sample_on", "fail", "read_options",
           "refuse_inapplicable", "scoped"]
