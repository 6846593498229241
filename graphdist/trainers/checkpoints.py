"""A run's checkpoints as the loop writes and reads them: every rank's state gathered into one atomic
file with the plan in force, the best epoch's model, and the resume that restores them: bit-identical on
the same worker count, and on another one (a job that lost or gained workers) with the model and
optimizer as saved and each rank's own state reset for the new formation (:func:`resume`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import logging

from graphdist import comm
from graphdist.checkpoint import CheckpointWriter
from graphdist.rundir import RunDir
from graphdist.trainers.base import Strategy

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)


def _rank_state(strategy: Strategy) -> dict[str, Any]:
    from graphdist.checkpoint import rng_state

    return {"rng": rng_state(), "scalers": {k: s.state_dict() for k, s in strategy.scalers.items()},
            **strategy.state_dict()}


def save(strategy: Strategy, run_dir: RunDir, epoch: int, progress: Optional[dict[str, Any]] = None) -> None:
    """Every rank's states gathered to rank 0, which writes one atomic checkpoint.

    ``epoch``: the epochs completed; written before this returns ("epoch N done" means saved).
    ``progress``: a checkpoint inside epoch ``epoch + 1`` (``--checkpoint-interval``): the seeds trained in it
    so far (``progress_record``), which a resume trains the rest of. Rank 0 copies the state and writes it
    on the writer's thread while training goes on (:class:`graphdist.checkpoint.CheckpointWriter`); a
    failed write is raised at the next checkpoint or at :func:`finish_writes`.
    """
    from graphdist.checkpoint import CHECKPOINT_NAME, atomic_torch_save, checkpoint_state

    ranks = comm.all_gather_object(_rank_state(strategy))
    optimizer = _whole_optimizer_state(strategy.optimizer)  # a collective where the tables' Adam state is sharded
    if not comm.is_main_process():
        return
    extra = {"ranks": ranks, "world_size": strategy.ctx.world_size, "strategy": strategy.name,
             "decisions": strategy.ctx.decisions, "plan": strategy.plan.to_dict()}
    if progress is not None:
        extra["progress"] = progress
    state = checkpoint_state(strategy.model, strategy.optimizer, epoch, extra, optimizer_state=optimizer)
    step = progress["step"] if progress else None

    def recorded() -> None:
        run_dir.write_status(checkpoint_epoch=epoch, checkpoint_step=step)

    if progress is not None:
        _WRITER.submit(state, run_dir.path / CHECKPOINT_NAME, then=recorded)
        return
    _WRITER.wait()  # the one in flight lands first, then this one, in place (no copy)
    atomic_torch_save(state, run_dir.path / CHECKPOINT_NAME)
    recorded()


def _whole_optimizer_state(optimizer: Any) -> Optional[dict[str, Any]]:
    """The optimizer's whole state on rank 0: a sharded ``RowAdam`` gathers its ranks' shares (every rank
    calls this); other optimizers' ``state_dict()`` is the same everywhere, so only rank 0 reads it."""
    gather = getattr(optimizer, "gathered_state_dict", None)
    if gather is not None and getattr(optimizer, "shard", None) is not None:
        return gather()
    return optimizer.state_dict() if comm.is_main_process() else None


def finish_writes(failed: bool = False) -> None:
    """Waits for the checkpoint in flight, if any (the loop's end). ``failed``: the run is ending on an error
    already, which a failed write must not hide (it is logged instead)."""
    try:
        _WRITER.wait()
    except Exception as exc:  # noqa: BLE001 - with failed, the run's own error is the one to raise
        if not failed:
            raise
        logger.error("the last mid-epoch checkpoint was not written: %s", exc)


_WRITER = CheckpointWriter()  # this process's checkpoint writes (rank 0's), one at a time


def progress_record(epoch: int, step: int, trained: "torch.Tensor", num_nodes: int) -> dict[str, Any]:
    """What a mid-epoch checkpoint keeps of epoch ``epoch`` after ``step`` steps: the seed nodes trained in it so far
    (global ids, every rank's), as a bit mask over the graph's nodes, and their count.

    Example:
        >>> import torch
        >>> rec = progress_record(3, 2, torch.tensor([0, 5, 9]), num_nodes=10)
        >>> rec["seeds"], trained_mask(rec).nonzero().view(-1).tolist()
        (3, [0, 5, 9])
    """
    import numpy as np
    import torch

    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[trained.to(torch.int64)] = True
    return {"epoch": int(epoch), "step": int(step), "num_nodes": int(num_nodes), "seeds": int(mask.sum()),
            "mask": torch.from_numpy(np.packbits(mask.numpy()))}


def trained_mask(progress: dict[str, Any]) -> "torch.Tensor":
    """The bool mask over the graph's nodes of the seeds a mid-epoch checkpoint's epoch had trained."""
    import numpy as np
    import torch

    bits = np.unpackbits(progress["mask"].numpy())[: progress["num_nodes"]]
    return torch.from_numpy(bits.astype(bool))


def save_best(strategy: Strategy, run_dir: RunDir, record: dict[str, Any]) -> None:
    """Rank 0 keeps the best-validation epoch's model as ``best.pt`` (atomic, like the checkpoint).

    No collective: every rank holds the same parameters after an epoch (the strategies sync them).
    """
    from graphdist.checkpoint import BEST_NAME, save_checkpoint

    _WRITER.wait()  # a mid-epoch checkpoint in flight lands first: one checkpoint write at a time
    key = strategy.task.best_key
    save_checkpoint(run_dir.path, strategy.model, strategy.optimizer, record["epoch"], name=BEST_NAME,
                    extra={key: record[key], "strategy": strategy.name})
    run_dir.write_status(best_epoch=record["epoch"], best_metric=key, best_value=record[key],
                        **({"best_val_acc": record[key]} if key == "val_acc" else {}))


def load(resume_dir: Any) -> dict[str, Any]:
    from graphdist.checkpoint import load_checkpoint

    return load_checkpoint(Path(resume_dir))


def saved_decisions(ckpt: dict[str, Any]) -> dict[str, Any]:
    """The timed and measured choices a checkpoint recorded (``WorkerContext.decisions``); empty for a
    checkpoint written before they were recorded."""
    return dict(ckpt["extra"].get("decisions") or {})


def saved_world_size(ckpt: dict[str, Any]) -> int:
    """The workers that wrote ``ckpt``."""
    return int(ckpt["extra"].get("world_size", 1))


def resume(strategy: Strategy, resume_dir: Path, ckpt: Optional[dict[str, Any]] = None) -> int:
    """Restores model, optimizer, this rank's RNGs and strategy state from ``resume_dir``'s checkpoint
    (``ckpt`` when the caller has loaded it); returns the epochs completed.

    On another worker count than the checkpoint's (a job that shrank or grew), see :func:`resume_resized`.
    """
    from graphdist.checkpoint import set_rng_state

    ckpt = ckpt if ckpt is not None else load(resume_dir)
    saved_strategy = ckpt["extra"].get("strategy", "minibatch")
    if saved_strategy != strategy.name:
        raise ValueError(f"--resume {resume_dir}: the checkpoint was written by --strategy {saved_strategy}, "
                         f"this job runs --strategy {strategy.name}; resume with --strategy {saved_strategy}")
    if saved_world_size(ckpt) != strategy.ctx.world_size or ckpt["extra"].get("progress"):
        # Mid-epoch, the ranks' loaders were somewhere inside their epoch's order: the rest of it is trained
        # from the progress mask with fresh streams, on the same worker count as on any other.
        return resume_resized(strategy, ckpt)
    strategy.model.load_state_dict(ckpt["model"])
    strategy.optimizer.load_state_dict(ckpt["optimizer"])
    saved = ckpt["extra"]["ranks"][strategy.ctx.rank]
    set_rng_state(saved["rng"])
    for name, scaler_state in saved.get("scalers", {}).items():  # (older checkpoints have none)
        if name in strategy.scalers:
            strategy.scalers[name].load_state_dict(scaler_state)
    strategy.load_state_dict({k: v for k, v in saved.items() if k not in ("rng", "scalers")})
    saved_plan = ckpt["extra"].get("plan")  # the plan in force when it was written (older checkpoints: in the state)
    if saved_plan and strategy.moves_shares:
        from placement.plan import Plan

        strategy.apply_plan(strategy.plan.with_shares(Plan.from_dict(saved_plan).shares))
    return int(ckpt["epoch"])


def resume_resized(strategy: Strategy, ckpt: dict[str, Any]) -> int:
    """Resumes an epoch-end checkpoint of W workers on this job's W' (collective only as building the strategy was).

    The placement has already regrouped the parts onto the W' workers as at a start. Carried over: the
    model and the optimizer (the same on every rank at an epoch's end), the epochs done, and what the
    strategy merges from every saved rank (:meth:`Strategy.resized_state`: aggregation averages its
    per-rank optimizer moments). Reset, as at a start: the loss scalers, the sync's int8 residuals and
    settled layers, stale halo buffers (the first step after a resize is exact), the rebalancer's
    shares (back to the plan's), the feature cache (rebuilt at start), the measured decisions. Every
    random stream (global, loader, sampler, serving) derives from (seed, epochs done, rank in the new
    formation), so the same checkpoint resumed twice on W' workers trains alike.
    """
    from graphdist.trainers.kit import reseeded, resized_seed, seed_everything

    ctx = strategy.ctx
    epoch, was = int(ckpt["epoch"]), saved_world_size(ckpt)
    strategy.model.load_state_dict(ckpt["model"])
    strategy.optimizer.load_state_dict(ckpt["optimizer"])
    seed = resized_seed(ctx.cfg.seed, epoch, ctx.rank)
    seed_everything(seed)
    fresh = reseeded(strategy.state_dict(), seed + 1, epoch)
    saved = [{k: v for k, v in r.items() if k not in ("rng", "scalers")} for r in ckpt["extra"]["ranks"]]
    strategy.load_state_dict(strategy.resized_state(fresh, saved))
    progress = ckpt["extra"].get("progress")
    if progress:
        strategy.resume_progress(progress)
    if comm.is_main_process():
        where = (f"in epoch {progress['epoch']} at step {progress['step']} ({progress['seeds']:,} of its seeds trained)"
                 if progress else f"after epoch {epoch}")
        logger.info("resumed %s on %d workers (was %d): %d parts regrouped", where, ctx.world_size, was,
                    strategy.plan.num_parts)
    return epoch


__all__ = ["load", "progress_record", "resume", "resume_resized", "save", "save_best", "saved_decisions",
           "saved_world_size", "trained_mask"]
