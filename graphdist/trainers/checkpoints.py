"""A run's checkpoints as the loop writes and reads them: every rank's state gathered into one atomic
file with the plan in force, the best epoch's model, and the resume that restores them (bit-identical)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from graphdist import comm
from graphdist.rundir import RunDir
from graphdist.trainers.base import Strategy


def _rank_state(strategy: Strategy) -> dict[str, Any]:
    from graphdist.checkpoint import rng_state

    return {"rng": rng_state(), "scalers": {k: s.state_dict() for k, s in strategy.scalers.items()},
            **strategy.state_dict()}


def save(strategy: Strategy, run_dir: RunDir, epoch: int) -> None:
    """Every rank's states gathered to rank 0, which writes one atomic checkpoint."""
    from graphdist.checkpoint import save_checkpoint


    ranks = comm.all_gather_object(_rank_state(strategy))
    if comm.is_main_process():
        save_checkpoint(run_dir.path, strategy.model, strategy.optimizer, epoch,
                        extra={"ranks": ranks, "world_size": strategy.ctx.world_size, "strategy": strategy.name,
                               "decisions": strategy.ctx.decisions, "plan": strategy.plan.to_dict()})
        run_dir.write_status(checkpoint_epoch=epoch)


def save_best(strategy: Strategy, run_dir: RunDir, record: dict[str, Any]) -> None:
    """Rank 0 keeps the best-validation epoch's model as ``best.pt`` (atomic, like the checkpoint).

    No collective: every rank holds the same parameters after an epoch (the strategies sync them).
    """
    from graphdist.checkpoint import BEST_NAME, save_checkpoint

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


def resume(strategy: Strategy, resume_dir: Path, ckpt: Optional[dict[str, Any]] = None) -> int:
    """Restores model, optimizer, this rank's RNGs and strategy state from ``resume_dir``'s checkpoint
    (``ckpt`` when the caller has loaded it); returns the epochs completed."""
    from graphdist.checkpoint import set_rng_state

    ckpt = ckpt if ckpt is not None else load(resume_dir)
    saved_world = int(ckpt["extra"].get("world_size", 1))
    if saved_world != strategy.ctx.world_size:
        raise ValueError(
            f"--resume {resume_dir}: the checkpoint was written by {saved_world} workers, "
            f"this job has {strategy.ctx.world_size}; resume with --num-workers {saved_world}"
        )
    saved_strategy = ckpt["extra"].get("strategy", "minibatch")
    if saved_strategy != strategy.name:
        raise ValueError(f"--resume {resume_dir}: the checkpoint was written by --strategy {saved_strategy}, "
                         f"this job runs --strategy {strategy.name}; resume with --strategy {saved_strategy}")
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


__all__ = ["load", "resume", "save", "save_best", "saved_decisions"]
