"""``graphdist-plan``'s profile of a training recipe on this machine: a short local job, nothing trained, a
``profile.json`` kept (the start-up profiler of ``--placement profiled``, ``graphdist/trainers/profile.py``).

Example:
    >>> from graphdist.config import TrainConfig
    >>> default_profile_path("parts/x-2", TrainConfig(), 2).name.startswith("x-2-")
    True
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from graphdist.config import TrainConfig, replace


def default_profile_path(partitions: str, cfg: TrainConfig, workers: int) -> Path:
    """``$GRAPHDIST_CACHE/profiles/<partition>-<recipe hash>.json``: one file per partition, recipe and workers."""
    from graphdist.data.paths import cache_dir
    from graphdist.trainers.profile import profile_key

    key = json.dumps({**profile_key(cfg, workers, []), "strategy": _profiled_strategy(cfg)}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir() / "profiles" / f"{Path(partitions).resolve().name}-{digest}.json"


def _profiled_strategy(cfg: TrainConfig) -> str:
    """A full-graph recipe is profiled as full-graph steps; any other as minibatch steps (which predict
    minibatch and aggregation alike)."""
    return "fullgraph" if cfg.strategy == "fullgraph" else "minibatch"


def measure_profile(cfg: TrainConfig, partitions: str, workers: int, out: Path) -> float:
    """``graphdist-plan``'s profile of the recipe ``cfg`` on this machine; returns the seconds it took.

    Runs the profile job (``graphdist.trainers.run.profile_worker``: the start-up profiler of
    ``--placement profiled``, nothing trained) with ``workers`` local workers and writes its
    ``profile.json`` to ``out`` (atomically).

    Raises:
        ValueError: the recipe cannot run here (a device this machine lacks); ``WorkerFailed`` naming the rank.
    """
    from graphdist.launch import spawn, start_workers_early
    from graphdist.trainers.run import profile_worker

    devices = cfg.devices if len(cfg.devices) in (1, workers) else cfg.devices[:1]
    from graphdist.api import check_devices

    check_devices(devices)
    job = replace(cfg, num_workers=workers, cluster=None, devices=tuple(devices), placement="profiled",
                  strategy=_profiled_strategy(cfg), rebalance_every=0, run_dir=None, resume=None, verbose=False)
    started = time.perf_counter()
    start_workers_early()
    with tempfile.TemporaryDirectory(prefix="graphdist-plan-") as tmp:
        spawn(profile_worker, workers, args=(workers, job, partitions, tmp, f"file://{os.path.join(tmp, 'store')}"),
              timeout=max(600.0, 4 * cfg.timeout))
        made = Path(tmp) / "profile.json"
        if not made.exists():
            raise ValueError("the profile job wrote no profile.json (the strategy has no probe steps?)")
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        shutil.copyfile(made, partial)
        os.replace(partial, out)
    return time.perf_counter() - started


__all__ = ["default_profile_path", "measure_profile"]
