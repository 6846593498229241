"""The run directory: resolved config, per-epoch metrics, plots. Written by rank 0 only.

```
runs/<name>/
  config.yaml       the resolved TrainConfig
  metrics.jsonl     one JSON object per epoch (loss, accuracies, time, seeds/s, bytes, hidden fraction)
  checkpoint.pt     the last completed epoch (atomic; torch.load(weights_only=True) reads it)
  best.pt           the model of the best-validation epoch (atomic; what --predict uses by default)
  run.json          status (running, failed, complete), epochs checkpointed, the partition checksum
  .lock             flock(2)-ed by the job writing here (the kernel drops it when that process dies)
  loss_acc.png      loss and accuracy curves
  time_breakdown.png  per-epoch sampling / compute / communication time
  breakdown.png     each rank's time over the run (minibatch), and bytes sent per purpose per epoch
  tensorboard/      with --tensorboard: the metrics and each step's loss as TensorBoard scalars
  predictions.npz   written by --predict: orig_id, pred, embedding
```
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from graphdist.section import ConfigError, fail_at

logger = logging.getLogger(__name__)

METRICS_NAME = "metrics.jsonl"
CONFIG_NAME = "config.yaml"
STATUS_NAME = "run.json"
LOCK_NAME = ".lock"


class RunDirLocked(RuntimeError):
    """Another live job holds the run directory; the message names its host and pid."""


class StdoutHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stdout`` is at each record (a notebook or test may swap it between runs)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:  # logging.StreamHandler assigns it; the property ignores it
        pass


def default_run_dir(job_id: Optional[str] = None) -> Path:
    """``runs/<job id>`` under torchrun/SLURM (every process and restart agrees on it), else ``runs/<time>``.

    Example:
        >>> str(default_run_dir("job-42"))
        'runs/job-42'
    """
    if job_id:
        return Path("runs") / job_id
    return Path("runs") / time.strftime("%Y%m%d-%H%M%S")


def write_config(run_dir: Path, config: dict[str, Any]) -> None:
    """Writes ``config.yaml`` (atomically: temp file + rename)."""
    import yaml

    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / CONFIG_NAME, yaml.safe_dump(config, sort_keys=False), "the run's config")


def read_config(run_dir: Path) -> dict[str, Any]:
    import yaml

    path = Path(run_dir) / CONFIG_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: {run_dir} is not a graphdist run directory")
    return yaml.safe_load(path.read_text()) or {}


@contextlib.contextmanager
def locked(run_dir: Path, flag: str = "--run-dir") -> Iterator[Path]:
    """Holds an exclusive ``flock`` on ``run_dir/.lock`` (creating the directory) while the job runs.

    The kernel releases the lock when the holder dies, even by ``kill -9``: no stale lock is left.

    Raises:
        RunDirLocked: another process holds it (its host, pid and start time named).
        OSError: the directory cannot be created or written (``flag`` and the path named).

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp())
        >>> with locked(run):
        ...     with locked(run):
        ...         pass
        Traceback (most recent call last):
        ...
        graphdist.runlog.RunDirLocked: ...is in use by pid ... on ...; wait for that job, or pick another --run-dir
    """
    import fcntl

    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise OSError(exc.errno, f"{flag} {run_dir}: cannot write there ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "an unknown process"
            raise RunDirLocked(f"{run_dir} is in use by {holder}; wait for that job, or pick another {flag}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}".encode(), 0)
        yield run_dir
    finally:
        os.close(fd)  # releases the lock


class RunDirTaken(ConfigError):
    """A new run was asked for in a run directory that holds another run's record; nothing was changed."""


def recorded_run(run_dir: Path) -> str:
    """What of a run's record ``run_dir`` holds, in words (``checkpoint.pt of epoch 3, metrics.jsonl of 3
    epochs``); empty when it holds none (no checkpoint, no metrics: nothing a new run would lose)."""
    from graphdist.checkpoint import CHECKPOINT_NAME

    run_dir = Path(run_dir)
    held = []
    if (run_dir / CHECKPOINT_NAME).exists():
        epoch = read_status(run_dir).get("checkpoint_epoch")
        held.append(f"{CHECKPOINT_NAME}" + (f" of epoch {epoch}" if epoch is not None else ""))
    metrics = run_dir / METRICS_NAME
    if metrics.exists() and metrics.stat().st_size:
        lines = sum(1 for line in metrics.read_text().splitlines() if line.strip())
        held.append(f"{METRICS_NAME} of {lines} epoch{'s' if lines != 1 else ''}")
    return ", ".join(held)


def claim_for_new_run(run_dir: Path, overwrite: bool) -> Optional[Path]:
    """Makes ``run_dir`` ready for a new run without losing a record: with ``overwrite``, moves what an
    earlier run left there (all but the lock) into ``<run_dir>.old-<time>`` and returns that path.

    Raises:
        RunDirTaken: ``run_dir`` holds a checkpoint or metrics and ``overwrite`` is False (the message
            names what is there and the two ways on).

    Example:
        >>> import tempfile
        >>> run = Path(tempfile.mkdtemp()) / "run"
        >>> claim_for_new_run(run, overwrite=False) is None  # nothing there: nothing to move
        True
    """
    run_dir = Path(run_dir)
    held = recorded_run(run_dir)
    if not held:
        return None
    if not overwrite:
        raise fail_at("run-dir", run_dir, f"holds a run ({held}); continue it with {{0}}, or start a new run there "
                      f"with {{1}} (which moves that run to {run_dir}.old-<time>; nothing is deleted)",
                      ("resume", run_dir), ("overwrite", True), error=RunDirTaken)
    aside = Path(f"{run_dir}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while aside.exists():
        n += 1
        aside = Path(f"{run_dir}.old-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
    aside.mkdir(parents=True)
    for entry in sorted(run_dir.iterdir()):
        if entry.name != LOCK_NAME:  # the lock stays: this job holds it
            entry.rename(aside / entry.name)
    logger.warning("--overwrite: the run that was in %s (%s) is now in %s", run_dir, held, aside)
    return aside


_STATUS_LOCK = threading.Lock()  # run.json is read, updated and replaced: one writer at a time


def write_status(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Updates ``run.json`` with ``fields`` (atomically) and returns the whole record.

    Thread-safe within a process: the checkpoint writer's thread records its checkpoints here too.
    """
    with _STATUS_LOCK:
        record = {**read_status(run_dir), **fields, "updated": time.strftime("%Y-%m-%dT%H:%M:%S")}
        write_text_atomic(Path(run_dir) / STATUS_NAME, json.dumps(record, indent=1) + "\n", "the run's status")
    return record


def read_status(run_dir: Path) -> dict[str, Any]:
    """``run.json`` as a dict ({} when absent or unreadable: runs written before it existed)."""
    try:
        return json.loads((Path(run_dir) / STATUS_NAME).read_text())
    except (OSError, ValueError):
        return {}


def append_metrics(run_dir: Path, record: dict[str, Any]) -> None:
    """Appends one epoch's record; flushed and fsynced so a crash keeps every finished epoch.

    A write that fails (a full disk) is cut off again: the file never ends in half a line.
    """
    from graphdist.data.paths import write_error

    path = Path(run_dir) / METRICS_NAME
    with open(path, "ab") as f:
        end = f.tell()
        try:
            f.write((json.dumps(record) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())
        except OSError as exc:
            error = write_error(exc, path, "the metrics", "the records of earlier epochs are intact")
            f.truncate(end)
            raise error from exc


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_NAME
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# The validation metric each task picks its best epoch by (trainers/tasks.py: ``Task.best_key``):
# accuracy, multi-label micro-F1, link-prediction AUC. A record holds one of them.
BEST_KEYS = ("val_acc", "val_f1", "val_auc")


def best_key(records: list[dict[str, Any]]) -> str:
    """The validation metric these records are scored by (``val_acc`` when none is there yet).

    Example:
        >>> best_key([{"epoch": 1, "val_f1": 0.5}])
        'val_f1'
    """
    for key in BEST_KEYS:
        if any(r.get(key) is not None for r in records):
            return key
    return BEST_KEYS[0]


def best_epoch(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The record with the highest validation metric (:func:`best_key`; first one on ties; the last
    record without any).

    Example:
        >>> best_epoch([{"epoch": 1, "val_acc": 0.7}, {"epoch": 2, "val_acc": 0.6}])["epoch"]
        1
    """
    key = best_key(history)
    scored = [r for r in history if r.get(key) is not None]
    if not scored:
        return history[-1] if history else {}
    return max(scored, key=lambda r: r[key])


def truncate_metrics(run_dir: Path, epochs: int) -> None:
    """Keeps the records of the first ``epochs`` epochs (a resume redoes anything after)."""
    kept = [r for r in read_metrics(run_dir) if r.get("epoch", 0) <= epochs]
    write_text_atomic(Path(run_dir) / METRICS_NAME, "".join(json.dumps(r) + "\n" for r in kept), "the metrics")


def write_text_atomic(path: Path, text: str, what: str) -> None:
    """Writes ``path`` through a temporary sibling and a rename: a failed write leaves the old file whole.

    Raises:
        OSError: naming ``what`` and ``path`` (and the free space when the disk is full); no
            temporary file is left.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "x.json"
        >>> write_text_atomic(path, "{}", "a test file"); path.read_text()
        '{}'
    """
    from graphdist.data.paths import write_error

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        error = write_error(exc, path, what, f"the previous {path.name} is intact" if path.exists() else "")
        tmp.unlink(missing_ok=True)
        raise error from exc


def plot_run(run_dir: Path, history: Optional[list[dict[str, Any]]] = None, title: str = "") -> list[Path]:
    """Draws loss/accuracy curves, the per-epoch time breakdown and, where the records have the numbers,
    each rank's time and the bytes per purpose (:func:`plot_breakdown`); returns the PNG paths.

    Args:
        title: what ran (dataset, model, workers), shown above both figures with the run's name.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = read_metrics(run_dir) if history is None else history
    if not history:
        return []
    epochs = [r["epoch"] for r in history]
    marker = "o" if len(epochs) <= 30 else None  # markers at every one of 250 epochs hide the curve
    heading = " | ".join(x for x in (title, Path(run_dir).name) if x)
    out = []
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, [r["loss"] for r in history], marker=marker)
    ax_loss.set(xlabel="epoch", ylabel="training loss", title="loss")
    labels = {"train_acc": "train (sampled, during the epoch)", "train_full_acc": "train (full neighbourhoods)",
              "val_acc": "validation", "test_acc": "test"}
    for key, label in labels.items():
        if any(r.get(key) is not None for r in history):
            points = [(r["epoch"], r[key]) for r in history if r.get(key) is not None]
            ax_acc.plot(*zip(*points), marker=marker, label=label)
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    ax_acc.legend(loc="lower right", fontsize="small")
    for ax in (ax_loss, ax_acc):
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(heading)
    fig.tight_layout()
    path = Path(run_dir) / "loss_acc.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    out.append(path)

    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = [0.0] * len(history)
    parts = (("time_sample_s", "sampling wait"), ("time_compute_s", "compute"), ("time_comm_s", "exposed comm"),
             ("eval_time_s", "evaluation"))
    for key, label in parts:
        values = [r.get(key, 0.0) or 0.0 for r in history]
        if any(values):
            ax.bar(epochs, values, bottom=bottom, label=label)
            bottom = [b + v for b, v in zip(bottom, values)]
    ax.set(xlabel="epoch", ylabel="seconds (rank 0)", title="time per epoch")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")  # beside the bars, not over them
    ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(heading)
    fig.tight_layout()
    path = Path(run_dir) / "time_breakdown.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    out.append(path)
    breakdown = plot_breakdown(run_dir, history, heading)
    return out + ([breakdown] if breakdown else [])


# Per-rank time parts of a minibatch record (lists, one entry per rank), in stacking order.
RANK_TIME_PARTS = (("compute_s", "compute"), ("sync_wait_s", "sync wait"), ("sample_wait_s", "sample wait"))


def rank_time_totals(history: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Where each rank's time went, summed over the epochs: the ``RANK_TIME_PARTS`` and ``other``.

    ``other`` is the epoch's time (the slowest rank's, which every rank waits for at the epoch's
    end) less the measured parts: idle at a barrier, evaluation bookkeeping, rebalancing. Only
    records with every per-rank list count (other strategies have none: the result is then {}).

    Example:
        >>> rank_time_totals([{"epoch_time_s": 10.0, "compute_s": [6.0, 3.0], "sync_wait_s": [1.0, 2.0],
        ...                    "sample_wait_s": [2.0, 1.0]}])
        {'compute': [6.0, 3.0], 'sync wait': [1.0, 2.0], 'sample wait': [2.0, 1.0], 'other': [1.0, 4.0]}
    """
    keys = [key for key, _ in RANK_TIME_PARTS]
    records = [r for r in history if all(isinstance(r.get(k), list) for k in keys) and r.get("epoch_time_s")]
    if not records:
        return {}
    ranks = min(len(r[k]) for r in records for k in keys)
    totals = {label: [0.0] * ranks for _, label in RANK_TIME_PARTS} | {"other": [0.0] * ranks}
    for r in records:
        for rank in range(ranks):
            parts = [float(r[key][rank] or 0.0) for key in keys]
            for (_, label), seconds in zip(RANK_TIME_PARTS, parts):
                totals[label][rank] += seconds
            # Clock jitter can make the parts exceed the epoch by a hair: never a negative bar.
            totals["other"][rank] += max(0.0, float(r["epoch_time_s"]) - sum(parts))
    return totals


def bytes_per_tag(history: list[dict[str, Any]]) -> dict[str, list[float]]:
    """MiB sent per purpose tag (``bytes_sent``) in each epoch, 0 where a tag sent nothing; most bytes first.

    Tags that never sent a byte are left out ({} for a one-worker run).

    Example:
        >>> bytes_per_tag([{"bytes_sent": {"grad": 2**20, "eval": 0}},
        ...                {"bytes_sent": {"grad": 2**20, "sample": 3 * 2**20}}])
        {'sample': [0.0, 3.0], 'grad': [1.0, 1.0]}
    """
    tags = {tag for r in history for tag in (r.get("bytes_sent") or {})}
    per_tag = {tag: [(r.get("bytes_sent") or {}).get(tag, 0) / 2**20 for r in history] for tag in tags}
    kept = {tag: mib for tag, mib in per_tag.items() if any(mib)}
    return dict(sorted(kept.items(), key=lambda item: (-sum(item[1]), item[0])))


def plot_breakdown(run_dir: Path, history: list[dict[str, Any]], heading: str = "") -> Optional[Path]:
    """``breakdown.png``: each rank's time summed over the epochs, and bytes sent per purpose per epoch.

    A panel whose numbers the records lack (a strategy without per-rank times, one worker sending
    nothing) is left out; with neither, no file is written and None returned.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks, sent = rank_time_totals(history), bytes_per_tag(history)
    panels = [lambda ax: _draw_rank_times(ax, ranks)] if ranks else []
    if sent:
        panels.append(lambda ax: _draw_bytes(ax, [r["epoch"] for r in history], sent))
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4), squeeze=False)
    for ax, draw in zip(axes[0], panels):
        draw(ax)
    fig.suptitle(heading)
    fig.tight_layout()
    path = Path(run_dir) / "breakdown.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _draw_rank_times(ax: Any, totals: dict[str, list[float]]) -> None:
    ranks = list(range(len(next(iter(totals.values())))))
    bottom = [0.0] * len(ranks)
    for label, seconds in totals.items():
        ax.bar(ranks, seconds, bottom=bottom, label=label)
        bottom = [b + s for b, s in zip(bottom, seconds)]
    ax.set(xlabel="rank", ylabel="seconds, all epochs", title="where each rank's time went", xticks=ranks)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")  # beside the bars, not over them


def _draw_bytes(ax: Any, epochs: list[int], per_tag: dict[str, list[float]]) -> None:
    bottom = [0.0] * len(epochs)
    for tag, mib in per_tag.items():
        ax.bar(epochs, mib, bottom=bottom, label=tag)
        bottom = [b + m for b, m in zip(bottom, mib)]
    ax.set(xlabel="epoch", ylabel="MiB sent (all ranks)", title="bytes sent per purpose")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.xaxis.get_major_locator().set_params(integer=True)
