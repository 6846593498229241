"""The run directory: resolved config, per-epoch metrics, plots. Written by rank 0 only.

```
runs/<name>/
  config.yaml       the resolved TrainConfig
  metrics.jsonl     one JSON object per epoch (loss, accuracies, time, seeds/s, bytes, hidden fraction)
  checkpoint.pt     the last completed epoch (atomic; torch.load(weights_only=True) reads it)
  loss_acc.png      loss and accuracy curves
  time_breakdown.png  per-epoch sampling / compute / communication time
  predictions.npz   written by --predict: orig_id, pred, embedding
```
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

logger = logging.getLogger(__name__)

METRICS_NAME = "metrics.jsonl"
CONFIG_NAME = "config.yaml"


def default_run_dir() -> Path:
    return Path("runs") / time.strftime("%Y%m%d-%H%M%S")


def write_config(run_dir: Path, config: dict[str, Any]) -> None:
    """Writes ``config.yaml`` (atomically: temp file + rename)."""
    import yaml

    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{CONFIG_NAME}.tmp"
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    os.replace(tmp, run_dir / CONFIG_NAME)


def read_config(run_dir: Path) -> dict[str, Any]:
    import yaml

    path = Path(run_dir) / CONFIG_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: {run_dir} is not a graphdist run directory")
    return yaml.safe_load(path.read_text()) or {}


def append_metrics(run_dir: Path, record: dict[str, Any]) -> None:
    """Appends one epoch's record; flushed and fsynced so a crash keeps every finished epoch."""
    with open(Path(run_dir) / METRICS_NAME, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def truncate_metrics(run_dir: Path, epochs: int) -> None:
    """Keeps the records of the first ``epochs`` epochs (a resume redoes anything after)."""
    kept = [r for r in read_metrics(run_dir) if r.get("epoch", 0) <= epochs]
    path = Path(run_dir) / METRICS_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, path)


def plot_run(run_dir: Path, history: Optional[list[dict[str, Any]]] = None) -> list[Path]:
    """Draws loss/accuracy curves and the per-epoch time breakdown; returns the PNG paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = read_metrics(run_dir) if history is None else history
    if not history:
        return []
    epochs = [r["epoch"] for r in history]
    out = []
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [r["loss"] for r in history], marker="o")
    ax_loss.set(xlabel="epoch", ylabel="training loss", title="loss")
    for key in ("train_acc", "val_acc", "test_acc"):
        if any(r.get(key) is not None for r in history):
            ax_acc.plot(epochs, [r.get(key) for r in history], marker="o", label=key.replace("_acc", ""))
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    ax_acc.legend()
    for ax in (ax_loss, ax_acc):
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    path = Path(run_dir) / "loss_acc.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    out.append(path)

    fig, ax = plt.subplots(figsize=(6, 4))
    bottom = [0.0] * len(history)
    for key, label in (("time_sample_s", "sampling wait"), ("time_compute_s", "compute"), ("time_comm_s", "exposed comm")):
        values = [r.get(key, 0.0) or 0.0 for r in history]
        ax.bar(epochs, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set(xlabel="epoch", ylabel="seconds (rank 0)", title="time per epoch")
    ax.legend()
    fig.tight_layout()
    path = Path(run_dir) / "time_breakdown.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    out.append(path)
    return out
