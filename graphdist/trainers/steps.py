"""The mini-batch step loop every sampled strategy runs: forward, the task's loss, backward, sync, step.

``--strategy minibatch`` trains with it, ``aggregation`` too (its local steps and its global
correction steps); what differs between them is the batches and the gradient sync handed in.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch

from graphdist import comm
from graphdist.trainers.base import EpochStats


def train_steps(
    batches: Any,
    sync: Any,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    with_degrees: bool,
    after_step: Optional[Callable[[int, int], Optional[float]]] = None,
    progress: Optional[Callable[[int, EpochStats, int, float], None]] = None,
    log_interval: int = 0,
    stats: Optional[EpochStats] = None,
    task: Optional[Any] = None,
    before_finish: Optional[Callable[[], None]] = None,
    precision: str = "fp32",
    scaler: Optional[Any] = None,
    advance: Optional[Callable[[int], None]] = None,
) -> EpochStats:
    """Mini-batch steps over ``batches``: forward through ``sync.model``, the task's loss, backward, sync, step.

    Args:
        batches: an iterable of ``SampledBatch`` with ``x`` and ``y``.
        sync: a ``GradientSync`` (``NoSync`` for ranks that train alone).
        task: what the step computes (``trainers/tasks.py``; default single-label node classification).
        after_step: called with the step number and its seed count after each optimizer step (a
            model averager, the rebalancer); it may return the seconds of its call that were not
            this rank's own work (the rebalancer's exchanges), which count as blocked, not compute.
        progress: ``progress(step, stats, seeds since last call, seconds since last call)`` every
            ``log_interval`` steps.
        advance: ``advance(step)`` after every step (a progress bar; it reads nothing from the device).
        stats: accumulate into these (default: new ones).
        before_finish: called after backward, before the wait for the step's gradient sync (the
            test-only slowdown stretches forward and backward there, so a slow rank is slow in
            every phase between two collectives, as a slower machine is).
        precision: ``--precision``: the forward and the loss run under its autocast (``trainers/precision.py``).
        scaler: ``fp16``'s loss scaler (``precision.loss_scaler``): backward from the scaled loss, the
            optimizer stepped through it; None steps plainly.
    """
    from sampling.staging import on_device

    from graphdist.trainers.precision import autocast
    from graphdist.trainers.tasks import SingleLabel

    stats = stats if stats is not None else EpochStats()
    task = task if task is not None else SingleLabel()
    model = sync.model
    total = len(batches) if hasattr(batches, "__len__") else None
    interval_start, interval_seeds = time.perf_counter(), 0
    # The steps' losses and correct counts stay tensors until the numbers are needed (a progress
    # line, the epoch's end): reading one synchronises a GPU with the step that made it.
    unread: list[tuple[torch.Tensor, int, torch.Tensor]] = []
    for step, batch in enumerate(batches, start=1):
        t0 = time.perf_counter()
        # A batch the loader staged on a side stream: this stream waits for its copy (no host wait)
        batch = on_device(batch, device)
        n = task.batch_weight(batch)
        optimizer.zero_grad(set_to_none=False)
        sync.begin_step(n)
        # Through sync.model (the DDP wrapper in ddp mode); no seeds this step: a zero loss still
        # runs backward, so every layer's collective is issued as on the other ranks.
        with autocast(precision, device):
            loss, out, correct = task.batch_loss(model, batch, with_degrees, device)
        try:
            (loss if scaler is None else scaler.scale(loss)).backward()
        except RuntimeError as exc:  # a sync's collective failed inside backward (DDP's reducer): name the peer
            failure = comm.comm_failure(exc, "the gradient sync in backward")
            if failure is None:
                raise
            raise failure from exc
        if before_finish is not None:
            before_finish()
        t_wait = time.perf_counter()
        synced = sync.finish()
        t_synced = time.perf_counter()
        if synced.total_seeds:
            # A step no rank had seeds for (a worker training alone past its last seed) has zero
            # gradients: stepping Adam on them would still move the weights by its momentum.
            if scaler is None:
                optimizer.step()
            else:  # unscales, and skips the step where a gradient is not finite (every synced rank alike)
                scaler.step(optimizer)
                scaler.update()
        held = after_step(step, n) if after_step is not None else None
        t1 = time.perf_counter()
        stats.steps += 1
        unread.append((loss.detach(), n, correct))
        stats.seeds += n
        # Blocked in collectives: finish()'s wait, and backward's wait for the step's seed count
        # (a fast rank waits there for a slow one's step to begin).
        blocked = (t_synced - t_wait) + synced.count_wait_s + (held or 0.0)
        stats.comm_exposed_s += blocked
        stats.compute_s += (t1 - t0) - blocked
        interval_seeds += n
        if advance is not None:
            advance(step)
        if progress is not None and log_interval and (step % log_interval == 0 or step == total):
            _read(unread, stats)
            now = time.perf_counter()
            progress(step, stats, interval_seeds, now - interval_start)
            interval_start, interval_seeds = now, 0
    _read(unread, stats)
    return stats


def _read(unread: list[tuple[torch.Tensor, int, Any]], stats: EpochStats) -> None:
    """Adds the unread steps' losses and correct counts to ``stats``, in step order, and forgets them."""
    for loss, n, correct in unread:
        step_loss = float(loss)
        stats.step_losses.append(step_loss)
        stats.loss_sum += step_loss * n
        stats.correct += float(correct)
    unread.clear()


def reporter(progress: Any, epoch: int, total: int, world_size: int, log_interval: int,
             suffix: Optional[Callable[[EpochStats], str]] = None) -> Callable[[int, EpochStats, int, float], None]:
    """``train_steps``' ``progress`` callback that tells ``progress`` (an ``EpochProgress``) the
    :func:`progress_line`, ``suffix(stats)`` appended, and the loss and rate a bar shows."""

    def report(step: int, stats: EpochStats, seeds: int, seconds: float) -> None:
        line = progress_line(epoch, step, total, stats, seeds, seconds, min(log_interval, step), world_size)
        progress.report(step, line + (suffix(stats) if suffix is not None else ""),
                        loss=stats.loss_sum / max(1, stats.seeds), seeds_per_s=seeds * world_size / max(seconds, 1e-9))

    return report


def progress_line(epoch: int, step: int, total: int, stats: EpochStats, seeds: int, seconds: float,
                  steps: int, world_size: int) -> str:
    """``epoch 3 step 120/400 | loss 0.4312 | 38.5 ms/step | 26,600 seeds/s``: the numbers since the last line
    (``steps`` steps, ``seeds`` of this rank's seeds, scaled to all ``world_size`` ranks), the loss over the epoch.

    Example:
        >>> progress_line(3, 120, 400, EpochStats(loss_sum=43.12, seeds=100), 2000, 0.77, 20, 2)
        'epoch 3 step 120/400 | loss 0.4312 | 38.5 ms/step | 5,195 seeds/s'
    """
    ms = 1000.0 * seconds / max(1, steps)
    loss = stats.loss_sum / max(1, stats.seeds)
    return (f"epoch {epoch} step {step}/{total} | loss {loss:.4f} | {ms:.1f} ms/step | "
            f"{seeds * world_size / max(seconds, 1e-9):,.0f} seeds/s")


__all__ = ["progress_line", "reporter", "train_steps"]
