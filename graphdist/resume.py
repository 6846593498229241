"""What ``--resume RUN`` may change, checked before any worker starts and before anything is written.

A resume continues the run's own config (``RUN/config.yaml``); flags, ``GRAPHDIST_<NAME>``
variables and ``--config`` override it with the usual precedence. Some options fix what the
checkpoint holds (the model's parameter shapes, each rank's part and random streams): a change of
one of those is refused, naming the flag and both values. The others (epochs, lr, timeout,
log-interval, eval-every, ...) may change, and are recorded in ``config.yaml`` only once the
resumed run has loaded its checkpoint on every rank.

Example:
    >>> from graphdist.config import TrainConfig
    >>> refused_changes(TrainConfig(model="sage").to_dict(), TrainConfig(model="gcn", epochs=9))
    [('model', 'gcn', 'the run has sage: it shapes the parameters in the checkpoint')]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from graphdist.config import TrainConfig
from graphdist.section import ConfigError, fail_at

# field -> what it fixes in the checkpoint (the reason the refusal gives)
FIXED_ON_RESUME: dict[str, str] = {
    "model": "it shapes the parameters in the checkpoint",
    "hidden": "it shapes the parameters in the checkpoint",
    "layers": "it shapes the parameters in the checkpoint",
    "heads": "it shapes the parameters in the checkpoint",
    "feature_norm": "the model was trained on features normalised that way",
    "dataset": "the checkpoint was trained on that graph",
    "partition_method": "each rank's part, and its sampler state, come from that partitioning",
    "seed": "the random streams in the checkpoint, and the on-the-fly partitioning, follow it",
    "strategy": "the checkpoint holds that strategy's state",
    "batch_size": "each rank's epoch order and position in it are saved at that batch size",
    "replicate": "it decides which sampler state each rank saved",
    "staleness": "the stale halo buffers are saved (or not) with it",
}
# field -> why a run with it set cannot continue bit for bit (a resume of one is refused without
# --inexact-resume, which continues it as a run of its own from the checkpoint)
INEXACT_ON_RESUME: dict[str, str] = {
    "avg_seconds": "it averages at wall-clock times, which no second run repeats (--avg-every K steps does)",
}


class ResumeRefused(ConfigError):
    """``--resume`` cannot continue this run as asked; nothing was started or written."""


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def refused_changes(saved: dict[str, Any], cfg: TrainConfig) -> list[tuple[str, Any, str]]:
    """Per option in ``FIXED_ON_RESUME`` whose value differs from the saved run's: its name, the value asked
    for, and the words after it (``the run has X: why``)."""
    wanted = cfg.to_dict()
    out = []
    for name, why in FIXED_ON_RESUME.items():
        if name not in saved or saved[name] is None:
            continue  # a run directory written before the option existed
        before, now = _shown(saved[name]), _shown(wanted[name])
        if before != now:
            out.append((name, wanted[name], f"the run has {before}: {why}"))
    return out


def checkpoint_epoch(run_dir: Path) -> Optional[int]:
    """Epochs the run's checkpoint holds (from ``run.json``, else the checkpoint itself); None: no checkpoint."""
    from graphdist import runlog
    from graphdist.checkpoint import CHECKPOINT_NAME

    if not (run_dir / CHECKPOINT_NAME).exists():
        return None
    status = runlog.read_status(run_dir)
    if status.get("checkpoint_epoch") is not None:
        return int(status["checkpoint_epoch"])
    from graphdist.checkpoint import load_checkpoint

    return int(load_checkpoint(run_dir)["epoch"])


def check_resume(cfg: TrainConfig, part_checksum: Optional[str] = None) -> int:
    """Refuses a resume that cannot continue ``cfg.resume`` as asked; returns the epochs already done.

    Args:
        cfg: the resolved config of the resumed job.
        part_checksum: ``partition.format.content_checksum`` of the partitions it will train on
            (None: not known yet; the partitions are then not compared).

    Raises:
        ResumeRefused: no run or checkpoint there, the run is already complete, an option in
            ``FIXED_ON_RESUME`` changed (every one named, with both values), or the partitions differ.
    """
    from graphdist import runlog

    run_dir = Path(cfg.resume)
    try:
        saved = runlog.read_config(run_dir)
    except FileNotFoundError as exc:
        raise fail_at("resume", run_dir, str(exc), error=ResumeRefused) from None
    done = checkpoint_epoch(run_dir)
    if done is None:
        raise fail_at("resume", run_dir, "no checkpoint there (the run ended before its first checkpoint); "
                      "start it again without {0}", ("resume", None), error=ResumeRefused)
    changes = refused_changes(saved, cfg)
    status = runlog.read_status(run_dir)
    if part_checksum and status.get("partitions_checksum") not in (None, part_checksum):
        changes.append(("partitions", cfg.partitions, f"it holds other partitions than the run's "
                        f"{saved.get('partitions')}: checksum {part_checksum[:12]}, the run's "
                        f"{status['partitions_checksum'][:12]}"))
    if changes:
        says = "cannot change " + "; ".join(f"{{{i}}} ({words})" for i, (_, _, words) in enumerate(changes))
        raise ResumeRefused("resume", ": " + says + ". Resume without them ({%d}), or start a new run" % len(changes),
                            mentions=(*((name, now) for name, now, _ in changes), ("resume", run_dir)), at=run_dir)
    inexact = [name for name in INEXACT_ON_RESUME if getattr(cfg, name) is not None]
    if inexact and not cfg.inexact_resume:
        name = inexact[0]
        raise ResumeRefused("resume", f": cannot continue bit for bit: the run has {{0}}, and {INEXACT_ON_RESUME[name]}",
                            hint="continue it anyway (from its checkpoint, averaging at other steps than an "
                                 "uninterrupted run would) with {1}",
                            mentions=((name, getattr(cfg, name)), ("inexact_resume", None)), at=run_dir)
    if done >= cfg.epochs:
        raise fail_at("resume", run_dir, f"the run is complete ({done} of {cfg.epochs} epochs); to train further: "
                      f"{{0}} {{1}}", ("resume", run_dir), ("epochs", done + max(1, done // 2)), error=ResumeRefused)
    return done


__all__ = ["FIXED_ON_RESUME", "ResumeRefused", "check_resume", "checkpoint_epoch", "refused_changes"]
