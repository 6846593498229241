"""The Python API: ``train(...)`` for one call, ``Trainer`` for finer control.

Example (one worker runs in this process; more are spawned):
    >>> import contextlib, io, tempfile
    >>> import graphdist as gd
    >>> with contextlib.redirect_stdout(io.StringIO()):  # the run's progress lines
    ...     result = gd.train(None, dataset="synthetic-2000", num_workers=1, epochs=2, hidden=16,
    ...                       run_dir=tempfile.mkdtemp())
    >>> [r["epoch"] for r in result.history], sorted(p.name for p in result.run_dir.iterdir())[:3]
    ([1, 2], ['checkpoint.pt', 'config.yaml', 'loss_acc.png'])
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch

from graphdist.config import TrainConfig, replace

logger = logging.getLogger("graphdist")


@dataclass
class TrainResult:
    """What a run produced.

    Attributes:
        history: one record per epoch (as in ``metrics.jsonl``).
        run_dir: the run directory (config, metrics, checkpoint, plots).
        final: the last epoch's record.
        best: the record of the epoch with the best validation accuracy (test accuracy read there).
    """

    history: list[dict[str, Any]]
    run_dir: Path
    final: dict[str, Any] = field(default_factory=dict)
    best: dict[str, Any] = field(default_factory=dict)


def best_epoch(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The record with the highest ``val_acc`` (first one on ties; the last record without any)."""
    scored = [r for r in history if r.get("val_acc") is not None]
    if not scored:
        return history[-1] if history else {}
    return max(scored, key=lambda r: r["val_acc"])


def check_devices(devices: tuple[str, ...]) -> None:
    """Fails before any worker starts when a requested CUDA device does not exist here.

    Example:
        >>> check_devices(("cpu",))
    """
    wanted = [d for d in devices if d.startswith("cuda")]
    if not wanted:
        return
    if not torch.cuda.is_available():
        raise ValueError(
            f"--devices asks for {', '.join(wanted)} but this torch build ({torch.__version__}) or machine has no "
            "CUDA device; use --devices cpu, or install a CUDA build (make TORCH_INDEX=<a CUDA wheel index> ...)"
        )
    count = torch.cuda.device_count()
    for d in wanted:
        index = int(d.split(":")[1]) if ":" in d else 0
        if index >= count:
            raise ValueError(f"--devices {d}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})")


class Trainer:
    """Prepares partitions and a run directory, then trains on local or torchrun/SLURM workers.

    Args:
        config: the resolved ``TrainConfig``.
        model: a user ``torch.nn.Module`` with ``forward(x, blocks)``; None builds ``config.model``.

    Example:
        >>> import contextlib, io
        >>> trainer = Trainer(TrainConfig(dataset="synthetic-2000", num_workers=2, epochs=1))
        >>> with contextlib.redirect_stdout(io.StringIO()):
        ...     parts = trainer.prepare_partitions()  # partitioned once, into $GRAPHDIST_CACHE
        >>> parts.name, (parts / "meta.json").exists()
        ('synthetic-2000-metis-2-s0-h1', True)
    """

    def __init__(self, config: TrainConfig, model: Optional[torch.nn.Module] = None) -> None:
        self.config = config
        self.model = model
        if model is not None and not hasattr(model, "layer_forward"):
            logger.info("user model has no layer_forward: evaluation uses full-neighbour blocks on the whole model")

    # ----------------------------------------------------------- partitions
    def prepare_partitions(self) -> Path:
        """The partition directory to train on: given, or made once into the cache."""
        cfg = self.config
        from partition.api import PartitionConfig, default_output, partition, read_meta

        if cfg.partitions:
            path = Path(cfg.partitions)
            if not path.is_dir():
                raise FileNotFoundError(f"--partitions {path}: no such directory; make one with graphdist-partition")
        else:
            path = default_output(cfg.dataset, PartitionConfig(cfg.num_workers, cfg.partition_method, cfg.seed))
            if not (path / "meta.json").exists():
                from graphdist.data import load_graph

                logger.info("partitioning %s into %d parts (%s) at %s", cfg.dataset, cfg.num_workers,
                            cfg.partition_method, path)
                partition(load_graph(cfg.dataset), cfg.num_workers, method=cfg.partition_method, out=path,
                          seed=cfg.seed, force=True)
        meta = read_meta(path)
        if int(meta["num_parts"]) != cfg.num_workers:
            raise ValueError(
                f"--partitions {path} has {meta['num_parts']} parts but --num-workers is {cfg.num_workers}; "
                f"use --num-workers {meta['num_parts']} or repartition with --num-parts {cfg.num_workers}"
            )
        return path

    # ----------------------------------------------------------------- run
    def fit(self) -> TrainResult:
        """Trains; returns the history and the run directory. Raises ``WorkerFailed`` naming a failed rank."""
        from graphdist import runlog
        from graphdist.launch import detect_environment, spawn
        from graphdist.trainers.run import spawned_worker, worker_main

        from graphdist.trainers.run import apply_cluster

        env = detect_environment()
        cfg = self.config = apply_cluster(self.config, None if env.kind == "local" else env.world_size)
        check_devices(cfg.devices)
        run_dir = Path(cfg.resume or cfg.run_dir or runlog.default_run_dir())
        if env.kind != "local":
            if cfg.partitions is None:
                raise ValueError("under torchrun/SLURM pass --partitions DIR (partition once, before the job)")
            cfg = self._job_size(cfg, env)
            part_dir = Path(cfg.partitions)
            if env.rank == 0 and not cfg.resume:
                # The run directory must say what ran, so that --resume RUN_DIR works as locally.
                run_dir.mkdir(parents=True, exist_ok=True)
                (run_dir / runlog.METRICS_NAME).unlink(missing_ok=True)
                runlog.write_config(run_dir, replace(cfg, run_dir=str(run_dir)).to_dict())
            history = worker_main(env.rank, env.world_size, cfg, str(part_dir), str(run_dir), env.init_method,
                                  model=self.model)
            return self._result(history, run_dir)
        part_dir = self.prepare_partitions()
        self._check_strategy(cfg, part_dir)
        resolved = replace(cfg, partitions=str(part_dir), run_dir=str(run_dir))
        run_dir.mkdir(parents=True, exist_ok=True)
        if not cfg.resume:
            stale = run_dir / runlog.METRICS_NAME
            if stale.exists():
                stale.unlink()
        runlog.write_config(run_dir, resolved.to_dict())
        logger.info("config: %s", resolved.to_dict())
        if self.model is not None and cfg.num_workers > 1:
            from graphdist.models import check_picklable

            check_picklable(self.model)
        with tempfile.TemporaryDirectory(prefix="graphdist-init-") as tmp:
            init = f"file://{os.path.join(tmp, 'store')}"
            if cfg.num_workers == 1:
                history = worker_main(0, 1, resolved, str(part_dir), str(run_dir), init, model=self.model)
            else:
                spawn(spawned_worker, cfg.num_workers,
                      args=(cfg.num_workers, resolved, str(part_dir), str(run_dir), init, self.model))
                history = runlog.read_metrics(run_dir)
        return self._result(history, run_dir)

    def _check_strategy(self, cfg: TrainConfig, part_dir: Path) -> None:
        """The strategy's own refusals (model kind, memory), before any worker starts."""
        from graphdist.trainers.base import strategy_class
        from partition.api import read_meta

        strategy_class(cfg.strategy).check(cfg, read_meta(part_dir), self.model)

    @staticmethod
    def _job_size(cfg: TrainConfig, env: Any) -> TrainConfig:
        """Under torchrun/SLURM the launcher decides the worker count; the config records it."""
        from graphdist.config import DEFAULT_NUM_WORKERS

        if cfg.num_workers == env.world_size:
            return cfg
        if cfg.num_workers != DEFAULT_NUM_WORKERS and env.rank == 0:
            # (the default is not reported: it was not asked for)
            logger.warning("--num-workers %d is ignored under %s: the job has WORLD_SIZE=%d workers",
                           cfg.num_workers, env.kind, env.world_size)
        return replace(cfg, num_workers=env.world_size)

    @staticmethod
    def _result(history: list[dict[str, Any]], run_dir: Path) -> TrainResult:
        return TrainResult(history=history, run_dir=run_dir, final=history[-1] if history else {},
                           best=best_epoch(history))


def train(
    model: Optional[torch.nn.Module] = None,
    partitions: Union[str, Path, None] = None,
    strategy: str = "minibatch",
    num_workers: int = 2,
    epochs: int = 5,
    lr: float = 0.005,
    **options: Any,
) -> TrainResult:
    """Trains ``model`` (or the configured reference model) on a partitioned graph.

    Args:
        model: any ``torch.nn.Module`` with ``forward(x, blocks)`` (PyG layers work on
            ``(x, x[:b.num_dst]), b.edge_index``); None builds ``options["model"]`` (default GraphSAGE).
        partitions: a partition directory, or None with ``dataset=...`` to partition on the fly.
        strategy: a registered strategy (``graphdist.trainers.base.STRATEGIES``; default ``minibatch``).
        num_workers: workers to spawn locally (ignored under torchrun/SLURM).
        epochs, lr: optimisation.
        **options: any other ``TrainConfig`` field (``hidden``, ``fanouts``, ``sync``, ``dataset``, ...).

    Returns:
        ``TrainResult`` with the history, the best-validation record and the run directory.

    Example:
        >>> import contextlib, io, tempfile
        >>> from graphdist.models import build_model
        >>> model = build_model("gcn", in_dim=100, hidden=16, out_dim=16, num_layers=2)  # or any nn.Module
        >>> with contextlib.redirect_stdout(io.StringIO()):
        ...     res = train(model, dataset="synthetic-2000", num_workers=1, epochs=1, fanouts=(5, 5),
        ...                 run_dir=tempfile.mkdtemp())
        >>> res.final["epoch"], res.best is not None
        (1, True)
    """
    if "fanouts" in options:
        options["fanouts"] = tuple(options["fanouts"])
        options.setdefault("layers", len(options["fanouts"]))
    if "devices" in options and isinstance(options["devices"], str):
        options["devices"] = tuple(options["devices"].split(","))
    cfg = TrainConfig(partitions=str(partitions) if partitions else None, strategy=strategy,
                      num_workers=num_workers, epochs=epochs, lr=lr, **options)
    return Trainer(cfg, model=model).fit()
