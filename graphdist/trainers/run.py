"""One worker's whole run: join the group, build, resume, train epochs, evaluate, checkpoint.

``worker_main`` is what the local launcher spawns and what each torchrun/srun
process calls. Rank 0 writes the run directory; every rank contributes its RNG
and sampler states to the checkpoint so that a resume is bit-identical.
"""

from __future__ import annotations

import logging
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from graphdist import comm
from graphdist.config import TrainConfig

logger = logging.getLogger("graphdist")


def setup_logging(rank: int, verbose: bool = False) -> None:
    """``[rank k]`` prefixed logs; rank 0 at INFO, the others at WARNING unless ``verbose``."""
    level = logging.INFO if rank == 0 or verbose else logging.WARNING
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(f"[rank {rank}] %(message)s"))
    root = logging.getLogger("graphdist")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def join_job(rank: int, world_size: int, cfg: TrainConfig, init_method: str) -> None:
    """What every worker process does first: logging, allocator, threads, device, process group.

    NCCL only when every worker has a GPU; otherwise gloo for all (CPU ranks cannot join NCCL).
    """
    from graphdist.launch import tune_allocator

    setup_logging(rank)
    tune_allocator()
    torch.set_num_threads(cfg.threads)
    all_cuda = all(d.startswith("cuda") for d in cfg.devices)
    if all_cuda and cfg.device_of(rank).startswith("cuda"):
        torch.cuda.set_device(torch.device(cfg.device_of(rank)))
    comm.init_process_group(rank, world_size, init_method, backend="nccl" if all_cuda else "gloo",
                            timeout_s=cfg.timeout)


def _rank_state(state: Any) -> dict[str, Any]:
    from graphdist.checkpoint import rng_state

    # The loader's state holds its shuffle generator and its sampler's; the neighbour
    # source's serving generator answers other ranks' requests.
    return {"rng": rng_state(), "loader": state.loader.state_dict(), "serve": state.neighbor_source.get_state()}


def _restore_rank_state(state: Any, saved: dict[str, Any]) -> None:
    from graphdist.checkpoint import set_rng_state

    set_rng_state(saved["rng"])
    state.loader.load_state_dict(saved["loader"])
    state.neighbor_source.set_state(saved["serve"])


def _save(state: Any, run_dir: Path, epoch: int) -> None:
    """Every rank's states gathered to rank 0, which writes one atomic checkpoint."""
    from graphdist.checkpoint import save_checkpoint

    ranks = comm.all_gather_object(_rank_state(state))
    if state.rank == 0:
        save_checkpoint(run_dir, state.model, state.optimizer, epoch, extra={"ranks": ranks,
                                                                             "world_size": state.world_size})


def _resume(state: Any, resume_dir: Path) -> int:
    from graphdist.checkpoint import load_checkpoint

    ckpt = load_checkpoint(resume_dir)
    saved_world = int(ckpt["extra"].get("world_size", 1))
    if saved_world != state.world_size:
        raise ValueError(
            f"--resume {resume_dir}: the checkpoint was written by {saved_world} workers, "
            f"this job has {state.world_size}; resume with --num-workers {saved_world}"
        )
    state.model.load_state_dict(ckpt["model"])
    state.optimizer.load_state_dict(ckpt["optimizer"])
    _restore_rank_state(state, ckpt["extra"]["ranks"][state.rank])
    return int(ckpt["epoch"])


def worker_main(
    rank: int,
    world_size: int,
    cfg: TrainConfig,
    partition_dir: str,
    run_dir: str,
    init_method: str,
    model: Optional[torch.nn.Module] = None,
) -> list[dict[str, Any]]:
    """Runs training on this rank; returns the per-epoch history (identical on every rank).

    Raises:
        CommError: a collective failed or timed out (names this rank and the operation).
    """
    from graphdist import runlog
    from graphdist.trainers.minibatch import build_worker, evaluate, reduce_epoch, train_epoch

    join_job(rank, world_size, cfg, init_method)
    try:
        seed_everything(cfg.seed + rank)
        state = build_worker(rank, world_size, cfg, partition_dir, model=model)
        run_path = Path(run_dir)
        start_epoch = _resume(state, Path(cfg.resume)) if cfg.resume else 0
        if rank == 0 and cfg.resume:
            runlog.truncate_metrics(run_path, start_epoch)
            logger.info("resumed from %s after epoch %d", cfg.resume, start_epoch)
        history = runlog.read_metrics(run_path) if rank == 0 else []
        for epoch in range(start_epoch + 1, cfg.epochs + 1):
            comm.reset_byte_counts()
            stats = train_epoch(state, epoch, on_step=(lambda s, line: logger.info(line)) if rank == 0 else None)
            record = {"epoch": epoch, **reduce_epoch(stats)}
            sent = comm.all_gather_object(comm.byte_counts())
            record["bytes_sent"] = {k: sum(s.get(k, 0) for s in sent) for k in sorted({k for s in sent for k in s})}
            record["time_sample_s"] = stats.sample_wait_s
            record["time_compute_s"] = stats.compute_s
            record["time_comm_s"] = stats.comm_exposed_s
            record["cache_hit_rate"] = state.features.stats.hit_rate
            if cfg.eval_every and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs):
                t0 = time.perf_counter()
                record.update(evaluate(state))
                record["eval_time_s"] = time.perf_counter() - t0
            _save(state, run_path, epoch)
            if rank == 0:
                runlog.append_metrics(run_path, record)
                history.append(record)
                logger.info(_epoch_line(record))
        if rank == 0:
            runlog.plot_run(run_path, history)
        return history
    finally:
        comm.shutdown()


def _epoch_line(r: dict[str, Any]) -> str:
    parts = [f"epoch {r['epoch']} done", f"loss {r['loss']:.4f}", f"{r['epoch_time_s']:.1f} s",
             f"{r['seeds_per_s']:,.0f} seeds/s"]
    for key in ("val_acc", "test_acc"):
        if r.get(key) is not None:
            parts.append(f"{key.replace('_acc', '')} {100 * r[key]:.2f}%")
    mb = sum(r.get("bytes_sent", {}).values()) / 2**20
    parts.append(f"sent {mb:,.1f} MiB")
    if r.get("hidden_fraction") is not None:
        parts.append(f"hidden {100 * r['hidden_fraction']:.0f}%")
    return " | ".join(parts)


def spawned_worker(rank: int, world_size: int, cfg: TrainConfig, partition_dir: str, run_dir: str,
                   init_method: str, model: Optional[torch.nn.Module] = None) -> None:
    """The local launcher's entry point (``fn(rank, *args)``)."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        worker_main(rank, world_size, cfg, partition_dir, run_dir, init_method, model=model)
    except KeyboardInterrupt:
        # The parent handles Ctrl-C and stops everyone; a quiet exit here avoids N tracebacks.
        sys.exit(130)
