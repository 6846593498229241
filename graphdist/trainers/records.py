"""An epoch's record over all workers (``metrics.jsonl``'s line) and its one line in the log."""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from graphdist import comm
from graphdist.trainers.base import EpochStats


def reduce_epoch(stats: EpochStats) -> dict[str, Any]:
    """The epoch's record over all workers: counts and sync totals summed, the slowest rank's time,
    strategy extras averaged over ranks, per-rank numbers as lists in rank order."""
    from graphdist.sync import SyncSummary

    keys = sorted(stats.extras)
    sync = stats.sync or SyncSummary().as_list()
    sums = torch.tensor([stats.loss_sum, stats.seeds, stats.correct, *sync, *(stats.extras[k] for k in keys)],
                        dtype=torch.float64)
    comm.all_reduce(sums, tag="eval")
    times = torch.tensor([stats.time_s], dtype=torch.float64)
    comm.all_reduce(times, op="max", tag="eval")
    ranks = comm.get_world_size()
    values = sums.tolist()
    loss_sum, seeds, correct = values[:3]
    summary = SyncSummary.from_list(values[3 : 3 + len(sync)])
    extras = {k: v / ranks for k, v in zip(keys, values[3 + len(sync) :])}
    epoch_time = float(times[0])
    record: dict[str, Any] = {
        "loss": loss_sum / max(1.0, seeds),
        "train_acc": correct / max(1.0, seeds),
        "seeds": int(seeds),
        "steps": stats.steps,
        "epoch_time_s": epoch_time,
        "seeds_per_s": seeds / max(1e-9, epoch_time),
        # DWBP (docs/design.md#dwbps-timing-model), all steps and ranks; None where unmeasured (ddp, 1 worker).
        "hidden_fraction": _finite(summary.hidden_fraction),
        "predicted_hidden_fraction": _finite(summary.predicted_hidden_fraction),
        "backward_s": summary.backward_s / ranks,  # per rank, summed over the epoch's steps
        "grad_comm_s": summary.comm_s / ranks,  # T_comm: the layers' collective service times, per rank
        # This rank's (rank 0's) split of its epoch time.
        "time_sample_s": stats.sample_wait_s,
        "time_compute_s": stats.compute_s,
        "time_comm_s": stats.comm_exposed_s,
    }
    record.update(extras)
    if stats.per_rank:
        gathered = comm.all_gather_object(stats.per_rank)
        record.update({k: [g.get(k) for g in gathered] for k in sorted(stats.per_rank)})
    return record


def _finite(x: float) -> Optional[float]:
    return None if math.isnan(x) else x


def traffic() -> dict[str, dict[str, int]]:
    """Bytes sent this epoch over all ranks, per tag, and the part that crossed hosts."""
    sent = comm.all_gather_object((comm.byte_counts(), comm.inter_host_byte_counts()))

    def total(i: int) -> dict[str, int]:
        keys = sorted({k for s in sent for k in s[i]})
        return {k: sum(s[i].get(k, 0) for s in sent) for k in keys}

    return {"bytes_sent": total(0), "bytes_inter_host": total(1)}


def epoch_line(r: dict[str, Any]) -> str:
    """The one log line per epoch.

    Example:
        >>> epoch_line({"epoch": 2, "loss": 0.5, "epoch_time_s": 1.25, "eval_time_s": 3.5, "seeds_per_s": 800.0,
        ...             "val_acc": 0.8, "bytes_sent": {"grad": 2**20}, "hidden_fraction": 0.9})
        'epoch 2 done | loss 0.5000 | train 1.2 s + eval 3.5 s | 800 seeds/s | val 80.00% | sent 1.0 MiB | hidden 90%'
    """
    took = f"train {r['epoch_time_s']:.1f} s"
    if r.get("eval_time_s") is not None:
        took += f" + eval {r['eval_time_s']:.1f} s"
    if r.get("period_s"):  # fullgraph: exchanges in flight across epochs land outside "train"
        took += f" (period {r['period_s']:.1f} s)"
    parts = [f"epoch {r['epoch']} done", f"loss {r['loss']:.4f}", took, f"{r['seeds_per_s']:,.0f} seeds/s"]
    for key in ("val_acc", "test_acc", "val_f1", "test_f1", "val_auc", "test_auc"):
        if r.get(key) is not None:
            metric = key.split("_", 1)[1]
            parts.append(f"{key.split('_')[0]} {100 * r[key]:.2f}%" if metric == "acc"
                         else f"{key.replace('_', ' ')} {100 * r[key]:.2f}")
    mb = sum(r.get("bytes_sent", {}).values()) / 2**20
    parts.append(f"sent {mb:,.1f} MiB")
    if r.get("hidden_fraction") is not None:
        parts.append(f"hidden {100 * r['hidden_fraction']:.0f}%")
    return " | ".join(parts)


__all__ = ["epoch_line", "reduce_epoch", "traffic"]
