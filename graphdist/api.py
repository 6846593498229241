"""The Python API: ``train(...)`` for one call, ``Trainer`` for finer control.

Example (one worker runs in this process; more are spawned):
    >>> import contextlib, io, tempfile
    >>> import graphdist as gd
    >>> with contextlib.redirect_stdout(io.StringIO()):  # the run's progress lines
    ...     result = gd.train(None, dataset="synthetic-2000", num_workers=1, epochs=2, hidden=16,
    ...                       run_dir=tempfile.mkdtemp())
    >>> [r["epoch"] for r in result.history], sorted(p.name for p in result.run_dir.glob("[!.]*"))[:4]
    ([1, 2], ['best.pt', 'breakdown.png', 'checkpoint.pt', 'config.yaml'])
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
from graphdist.models.registry import capabilities
from graphdist.options import STRATEGIES
from graphdist.rundir import RunDir
from graphdist.runlog import best_epoch
from graphdist.section import ConfigError, ConfigPathError, fail, fail_at
from partition.handle import PartitionDir

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


def check_devices(devices: tuple[str, ...]) -> None:
    """Fails before any worker starts when a requested CUDA device does not exist here.

    Example:
        >>> check_devices(("cpu",))
    """
    wanted = [d for d in devices if d.startswith("cuda")]
    if not wanted:
        return
    if not torch.cuda.is_available():
        raise fail("devices", f"asks for {', '.join(wanted)} but this torch build ({torch.__version__}) or machine "
                   "has no CUDA device", None, "use {0}, or install a CUDA build (make TORCH_INDEX=<a CUDA wheel "
                   "index> ...)", ("devices", "cpu"))
    count = torch.cuda.device_count()
    for d in wanted:
        index = int(d.split(":")[1]) if ":" in d else 0
        if index >= count:
            raise fail_at("devices", d, f"this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})")


MIN_STEPS = 100  # fewer optimizer steps than this rarely train a GNN: the launcher warns


def warn_short_run(cfg: TrainConfig, steps_per_epoch: int) -> bool:
    """Warns (and returns True) when the whole run makes fewer than ``MIN_STEPS`` optimizer steps.

    Example:
        >>> warn_short_run(TrainConfig(epochs=5, batch_size=512), steps_per_epoch=1)
        True
    """
    total = cfg.epochs * steps_per_epoch
    if total >= MIN_STEPS or cfg.resume:
        return False
    batched = STRATEGIES[cfg.strategy].batched
    hint = "raise --epochs" + (f" or lower --batch-size (now {cfg.batch_size})" if batched else "")
    logger.warning("this run makes only %d optimizer steps (%d epochs x %d steps); a GNN rarely learns in fewer than "
                   "%d: %s", total, cfg.epochs, steps_per_epoch, MIN_STEPS, hint)
    return True


def warn_oversubscribed(cfg: TrainConfig, cores: Optional[int] = None) -> bool:
    """Warns (and returns True) when this machine's workers want more threads than it has cores.

    Example:
        >>> warn_oversubscribed(TrainConfig(num_workers=8), cores=2)
        True
    """
    if cores is None:
        from graphdist.launch import usable_cores

        cores = len(usable_cores())
    wanted = cfg.num_workers * cfg.threads
    if wanted <= cores:
        return False
    logger.warning("%d workers x %d thread(s) on %d cores: oversubscribed, every worker runs slower than alone "
                   "(fine to try an %d-worker job; for speed use at most %d)", cfg.num_workers, cfg.threads, cores,
                   cfg.num_workers, max(1, cores // cfg.threads))
    return True


def check_binding(cfg: TrainConfig) -> None:
    """Refuses ``--bind-cores`` before any worker starts when the local workers' threads do not fit this machine's cores.

    Example:
        >>> check_binding(TrainConfig(num_workers=1, bind_cores=True))  # one worker is never bound: fine
    """
    from graphdist.launch import usable_cores, worker_cores
    from graphdist.trainers.run import worker_threads

    if cfg.bind_cores:
        worker_cores(usable_cores(), [worker_threads(cfg, r) for r in range(cfg.num_workers)], 0, True)


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
        self.started = False  # whether a worker ran (errors before it exit 2, after it 1)
        self.partitions: Optional[PartitionDir] = None  # opened by prepare_partitions
        if model is not None and not capabilities(model).layer_forward:
            logger.info("user model has no layer_forward: evaluation uses full-neighbour blocks on the whole model")

    # ----------------------------------------------------------- partitions
    def prepare_partitions(self) -> Path:
        """The partition directory to train on (absolute): given, or made once into the cache.

        Also records in the config the dataset the directory holds.

        Raises:
            FileNotFoundError: ``--partitions`` names no directory (the absolute path it looked at named).
            ValueError: ``--dataset`` contradicts the directory's dataset, or its part count is not the worker count.
        """
        cfg = self.config
        from partition.api import read_meta

        if cfg.partitions:
            path = Path(os.path.abspath(Path(cfg.partitions).expanduser()))
            if not path.is_dir():
                raise fail_at("partitions", cfg.partitions, f"no such directory (looked at {path}); make one with "
                              "graphdist-partition", error=ConfigPathError)
            meta = read_meta(path)
            self._check_dataset(cfg, meta, path)
        else:
            cached = self._cached_partitions(cfg)
            path, meta = cached.path, cached.meta
        if int(meta["num_parts"]) < cfg.num_workers:
            raise fail_at("partitions", str(path), f"has {meta['num_parts']} parts but {{0}} is {cfg.num_workers}; "
                          f"use {{1}} or repartition with graphdist-partition --num-parts {cfg.num_workers} (or a "
                          "multiple of it: a worker trains on the union of several parts)",
                          ("num_workers", None), ("num_workers", int(meta["num_parts"])))
        if int(meta["num_parts"]) > cfg.num_workers:
            from graphdist.trainers.run import plan_job

            plan = plan_job(PartitionDir(path, meta), cfg, cfg.num_workers)  # refused here, before any worker starts
            logger.info("%s parts on %d workers: %s", meta["num_parts"], cfg.num_workers,
                        "; ".join(f"rank {r.rank} parts {list(r.parts)}" for r in plan.ranks))
        self.config = replace(cfg, partitions=str(path), dataset=str(meta.get("dataset") or cfg.source))
        self.partitions = PartitionDir(path, meta)  # opened once: the checks, the launcher and the workers share it
        return path

    @staticmethod
    def _check_dataset(cfg: TrainConfig, meta: dict[str, Any], path: Path) -> None:
        """``--dataset`` given with ``--partitions`` must name the graph the directory was made from."""
        if cfg.dataset is None or not meta.get("dataset"):
            return
        if Path(cfg.dataset).stem.lower() != Path(str(meta["dataset"])).stem.lower():
            raise ConfigError("dataset", f"contradicts {{0}}, which holds {meta['dataset']}; give one of them",
                              mentions=(("partitions", str(path)),), at=cfg.dataset)

    @staticmethod
    def _cached_partitions(cfg: TrainConfig) -> PartitionDir:
        """``cfg.source`` partitioned into the cache, keyed by the source's content: a different graph saved
        under the same name is partitioned afresh, never served a stale directory."""
        from graphdist.data.loaders import source_key
        from partition.api import PartitionConfig, default_output, partition

        config = PartitionConfig(cfg.num_workers, cfg.partition_method, cfg.seed, task=cfg.task,
                                 edge_split=cfg.edge_split, eval_negatives=cfg.eval_negatives)
        key = source_key(cfg.source)
        path = default_output(cfg.source, config, key)
        if (path / "meta.json").exists():
            cached = PartitionDir(path)
            if cached.meta.get("source") == key:
                return cached
        from graphdist.data import load_graph

        try:
            graph = load_graph(cfg.source)  # first: an unknown name fails before anything is said or made
        except (ValueError, FileNotFoundError) as exc:
            error = ConfigPathError if isinstance(exc, FileNotFoundError) else ConfigError
            raise fail_at("dataset", cfg.source, str(exc), error=error) from None
        if key == "missing":  # fetched just now: key what was fetched
            key = source_key(cfg.source)
            path = default_output(cfg.source, config, key)
        logger.info("partitioning %s into %d parts (%s) at %s", cfg.source, cfg.num_workers,
                    cfg.partition_method, path)
        try:
            return PartitionDir(partition(graph, cfg.num_workers, method=cfg.partition_method, out=path, seed=cfg.seed,
                                          force=True, source=key, task=cfg.task, edge_split=cfg.edge_split,
                                          eval_negatives=cfg.eval_negatives))
        except PermissionError as exc:
            raise PermissionError(f"GRAPHDIST_CACHE {path.parents[1]}: cannot write partitions there ({exc}); "
                                  f"point GRAPHDIST_CACHE at a writable directory") from None

    # ----------------------------------------------------------------- run
    def fit(self) -> TrainResult:
        """Trains; returns the history and the run directory. Raises ``WorkerFailed`` naming a failed rank.

        Everything that can be refused (flags, devices, partitions, a resume that would change the
        model, a run directory another job holds) is refused before any worker starts; ``started``
        says whether one did.
        """
        from graphdist import runlog
        from graphdist.launch import detect_environment
        from graphdist.trainers.run import apply_cluster
        from graphdist.trainers.tensorboard import require_tensorboard

        env = detect_environment()
        if env.kind == "local" and self.config.num_workers > 1:
            from graphdist.launch import start_workers_early

            start_workers_early()  # the fork server's imports overlap the checks and partitioning below
        cfg = self.config = apply_cluster(self.config, None if env.kind == "local" else env.world_size)
        check_devices(cfg.devices)
        require_tensorboard(cfg.tensorboard)
        cfg = self.config = self._elastic_resume(cfg, env)
        run_dir = RunDir.at(os.path.abspath(Path(cfg.resume or cfg.run_dir or runlog.default_run_dir(env.run_id))
                                            .expanduser()))
        if cfg.resume and not run_dir.config_file.exists():
            raise fail_at("resume", cfg.resume, f"no {runlog.CONFIG_NAME} at {run_dir}; it is not a graphdist run "
                          "directory", error=ConfigPathError)
        if env.kind != "local":
            if cfg.partitions is None:
                raise fail("partitions", "is needed under torchrun/SLURM (partition once, before the job)", None,
                           "pass {0}", ("partitions", "DIR"))
            self.config = self._job_size(cfg, env)
        self.prepare_partitions()
        partitions = self.partitions
        cfg = self.config = replace(self.config, run_dir=str(run_dir), resume=str(run_dir) if cfg.resume else None)
        checksum = partitions.checksum
        if cfg.resume:
            from graphdist.resume import check_resume

            check_resume(cfg, checksum)
        self._check_strategy(cfg, partitions, env)
        if env.kind != "local":
            if not cfg.resume and not cfg.overwrite and run_dir.recorded_run():
                run_dir.claim_for_new_run(overwrite=False)  # every rank refuses, before any joins
            return self._run_job_rank(cfg, env, run_dir, partitions, checksum)
        existed = run_dir.exists()
        with run_dir.locked():
            if not cfg.resume:  # refused, or moved aside with --overwrite: a run's record is never lost
                run_dir.claim_for_new_run(cfg.overwrite)
            self._start_record(cfg, run_dir, checksum, env.run_id)
            try:
                history = self._spawn(cfg, run_dir, partitions)
            except BaseException as exc:
                self._record_failure(run_dir, exc, created=not existed)
                raise
            run_dir.write_status(status="complete")
        return self._result(history, run_dir)

    def _start_record(self, cfg: TrainConfig, run_dir: RunDir, checksum: str, job_id: Optional[str]) -> None:
        """A new run's config and status (with its run id: the launcher's job id, else a new one); a resumed
        run's config is rewritten by rank 0 once its checkpoint has loaded (a refused or failed resume
        leaves the record as it was). Called once the directory holds no other run's record."""
        import uuid

        new = {} if cfg.resume else {"checkpoint_epoch": None, "run_id": job_id or uuid.uuid4().hex}
        if not cfg.resume:
            run_dir.write_config(replace(cfg, overwrite=False).to_dict())
        run_dir.write_status(status="running", partitions_checksum=checksum, dataset=cfg.dataset,
                             error=None, **new)
        logger.debug("config: %s", cfg.to_dict())

    def _spawn(self, cfg: TrainConfig, run_dir: RunDir, partitions: PartitionDir) -> list[dict[str, Any]]:
        from graphdist.launch import spawn
        from graphdist.trainers.run import spawned_worker

        if self.model is not None and cfg.num_workers > 1:
            from graphdist.models import check_picklable

            check_picklable(self.model)
        with tempfile.TemporaryDirectory(prefix="graphdist-init-") as tmp:
            init = f"file://{os.path.join(tmp, 'store')}"
            self.started = True
            if cfg.num_workers == 1:
                from graphdist.trainers.run import worker_main

                return worker_main(0, 1, cfg, partitions, run_dir, init, model=self.model)
            spawn(spawned_worker, cfg.num_workers,
                  args=(cfg.num_workers, cfg, partitions, run_dir, init, self.model))
            return run_dir.read_metrics()

    @staticmethod
    def _record_failure(run_dir: RunDir, exc: BaseException, created: bool) -> None:
        """A failed run leaves nothing when it made the directory and never checkpointed; else it is marked
        failed in ``run.json`` (the checkpoint stays, for ``--resume``)."""
        import shutil

        if created and not run_dir.checkpoint.exists():
            shutil.rmtree(run_dir.path, ignore_errors=True)
            return
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        run_dir.write_status(status="interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", error=first)

    def _run_job_rank(self, cfg: TrainConfig, env: Any, run_dir: RunDir, partitions: PartitionDir,
                      checksum: str) -> TrainResult:
        """Under torchrun/SLURM: rank 0 locks and records the run directory, then every rank trains."""
        import contextlib

        from graphdist.trainers.run import worker_main

        with contextlib.ExitStack() as stack:
            if env.rank == 0:
                stack.enter_context(run_dir.locked())
                if not cfg.resume:
                    run_dir.claim_for_new_run(cfg.overwrite)
                self._start_record(cfg, run_dir, checksum, env.run_id)
            self.started = True
            history = worker_main(env.rank, env.world_size, cfg, partitions, run_dir, env.init_method,
                                  model=self.model)
            if env.rank == 0:
                run_dir.write_status(status="complete")
        return self._result(history, run_dir)

    def _check_strategy(self, cfg: TrainConfig, partitions: PartitionDir, env: Any) -> None:
        """The strategy's own refusals (model kind, memory), before any worker starts; then the
        warnings about a run that cannot go well (too few steps to learn, more local workers than cores)."""
        from graphdist.trainers.base import strategy_class
        from graphdist.trainers.tasks import make_task

        from graphdist.trainers.typed import check_typed_run

        meta = partitions.meta
        check_typed_run(cfg, meta)  # node types and relations: what a typed graph can train, and a typed model needs
        make_task(cfg.task, meta, cfg)  # a partition made for the other task is refused here
        strategy = strategy_class(cfg.strategy)
        strategy.check(cfg, meta, self.model)
        if env.rank == 0:
            warn_short_run(cfg, strategy.planned_steps(cfg, meta))
        if env.kind == "local":
            warn_oversubscribed(cfg)
            check_binding(cfg)

    @staticmethod
    def _elastic_resume(cfg: TrainConfig, env: Any) -> TrainConfig:
        """A job torchrun or SLURM formed again continues from its run directory's checkpoint.

        torchrun forms a job again after a failure (``--max-restarts``: the restart count grows) and
        when a node joins a ``--nnodes MIN:MAX`` job (the count stays): either way the checkpoint is
        this job's when its ``run.json`` names this job's id (``--rdzv-id``, ``SLURM_JOB_ID``), or
        when the job was restarted (its first formation claimed the directory).
        """
        from graphdist import runlog

        if cfg.resume or env.kind == "local":
            return cfg
        run_dir = RunDir.at(cfg.run_dir or runlog.default_run_dir(env.run_id))
        if not run_dir.checkpoint.exists():
            return cfg  # it failed before its first checkpoint: start over
        this_job = env.run_id is not None and run_dir.read_status().get("run_id") == env.run_id
        if not (this_job or env.restart_count > 0):
            return cfg  # another job's run: refused as any new run into it would be
        if env.rank == 0:
            if env.restart_count:
                logger.info("restart %d of the job: resuming %s", env.restart_count, run_dir)
            else:
                logger.info("the job formed again with %d workers (torchrun's membership changed): resuming %s",
                            env.world_size, run_dir)
        return replace(cfg, resume=str(run_dir), overwrite=False)

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
    def _result(history: list[dict[str, Any]], run_dir: RunDir) -> TrainResult:
        return TrainResult(history=history, run_dir=run_dir.path, final=history[-1] if history else {},
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
            ``(x, x[:b.num_dst]), b.edge_index``), or a reference model's name (``"sage"``, ``"rgcn"``, ...);
            None builds the default, GraphSAGE.
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
    if isinstance(model, str):  # a reference model by name: the config's --model
        options["model"], model = model, None
    from graphdist.config import refuse_inapplicable

    trainer = None
    try:
        cfg = TrainConfig(partitions=str(partitions) if partitions else None, strategy=strategy,
                          num_workers=num_workers, epochs=epochs, lr=lr, **options)
        defaults = TrainConfig()
        # Given: a keyword away from its default (an option this run would not read is refused).
        refuse_inapplicable(cfg, {k for k, v in options.items() if getattr(defaults, k, v) != v})
        trainer = Trainer(cfg, model=model)
        return trainer.fit()
    except ConfigError as exc:
        if trainer is not None and trainer.started:
            raise
        raise exc.for_api() from None
