"""The start banner: what this run trains, on what, how, and where it writes, in about eight lines.

Rank 0 prints it once its strategy is built, so it can say what each ``auto`` setting chose
(the allreduce algorithm, ``--compress auto``, prefetch) and count the model's parameters.
``--verbose`` adds the details behind it (config, topology and plan, sync wiring, each part).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Optional, Sequence

from graphdist.console import banner, shown_path


def _data_row(meta: dict[str, Any], task: str) -> str:
    """``cora: 2,708 nodes, 10,556 edges, 1,433 features, 7 classes``."""
    words = [f"{int(meta['num_nodes']):,} nodes", f"{int(meta['num_edges']):,} edges"]
    if meta.get("feature_dim"):
        words.append(f"{int(meta['feature_dim']):,} features")
    if meta.get("num_classes"):
        words.append(f"{int(meta['num_classes'])} {'labels' if meta.get('multilabel') else 'classes'}")
    name = os.path.basename(str(meta.get("dataset") or "graph"))
    typed = ""
    if meta.get("schema"):  # a typed graph: its types and relations (graphdist.data.hetero)
        from graphdist.data.schema import Schema

        schema = Schema.from_dict(meta["schema"])
        typed = f"; {schema.describe()}, labels on {schema.target}"
    return f"{name}: {', '.join(words)}{typed}" + ("" if task == "node" else f"; task {task}")


def _partition_row(meta: dict[str, Any], workers: int) -> str:
    """``metis, 2 parts, edge cut 18.1%`` (and how parts group onto fewer workers)."""
    words = [str(meta.get("method", "?")), f"{int(meta['num_parts'])} parts"]
    if meta.get("edge_cut") is not None:
        words.append(f"edge cut {100 * float(meta['edge_cut']):.1f}%")
    if int(meta["num_parts"]) > workers:
        words.append(f"grouped onto {workers} workers")
    return ", ".join(words)


def _model_row(strategy: Any, cfg: Any) -> str:
    """``sage: 2 layers x 128 hidden, 29,840 parameters`` (a user's model by its class name)."""
    model = strategy.ctx.model
    params = sum(p.numel() for p in strategy.model.parameters())
    name = type(model).__name__ if model is not None else cfg.model
    shape = "" if model is not None else f"{cfg.layers} layers x {cfg.hidden} hidden, "
    precision = "" if cfg.precision == "fp32" else f", {cfg.precision}"
    return f"{name}: {shape}{params:,} parameters{precision}"


def _workers_row(plan: Any, threads: int, hosts: int, cores: Optional[Sequence[int]]) -> str:
    """``2 x cpu on 1 host, 1 thread each, bound to their own cores``."""
    devices = Counter(r.device for r in plan.ranks)
    words = [" + ".join(f"{n} x {d}" for d, n in devices.items()) + f" on {hosts} host{'s' if hosts != 1 else ''}",
             f"{threads} thread{'s' if threads != 1 else ''} each"]
    if cores is not None:
        words.append("bound to their own cores")
    return ", ".join(words)


def start_banner(strategy: Any, run_dir: Any, cores: Optional[Sequence[int]] = None, resumed: int = 0) -> str:
    """The banner for ``strategy`` (built, on rank 0) writing to ``run_dir``.

    Args:
        cores: the cores rank 0 was bound to (None: left to the scheduler).
        resumed: the epochs a resumed run had completed (0: a new run).
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        title = f"graphdist {version('graphdist')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        title = "graphdist"

    ctx = strategy.ctx
    cfg = ctx.cfg
    meta = ctx.partitions.meta
    rows = [
        ("data", _data_row(meta, cfg.task)),
        ("partitions", _partition_row(meta, ctx.world_size)),
        ("model", _model_row(strategy, cfg)),
        *strategy.describe(),
        ("workers", _workers_row(ctx.plan, cfg.threads, ctx.topology.num_hosts, cores)),
        ("epochs", f"{cfg.epochs}" + (f", resumed after epoch {resumed}" if resumed else "")),
        ("run", shown_path(run_dir)),
    ]
    return banner(title, rows)


__all__ = ["start_banner"]
