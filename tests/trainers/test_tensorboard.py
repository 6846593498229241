"""``--tensorboard``: the event files hold metrics.jsonl's numbers and one loss per optimizer step;
a missing package is refused before any worker starts.

Runs are one in-process worker on the generated 2,000-node graph (about a second each).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

TINY = dict(num_workers=1, dataset="synthetic-2000", hidden=16, fanouts=(5, 5), batch_size=200, log_interval=1000,
            timeout=30.0)


def _scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag in ``run/tensorboard`` as (step, value) pairs, purged events left out."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _require_tensorboard() -> None:
    """In the dev extras that ``make test`` installs: CI must have it."""
    import importlib.util

    from graphdist.testing.env import require

    require(importlib.util.find_spec("tensorboard") is not None, "tensorboard is not installed: pip install -e '.[dev]'")


def test_event_files_hold_the_metrics_and_one_loss_per_step(tmp_path, capsys):
    _require_tensorboard()
    from graphdist.api import train

    run = tmp_path / "run"
    result = train(None, epochs=2, run_dir=str(run), tensorboard=True, **TINY)
    records = _records(run)
    assert [r["epoch"] for r in records] == [1, 2] and result.history[-1]["epoch"] == 2
    scalars = _scalars(run)
    ends = [records[0]["steps"], records[0]["steps"] + records[1]["steps"]]  # each epoch's last global step
    for key in ("loss", "train_acc", "val_acc", "test_acc", "epoch_time_s", "seeds_per_s", "eval_time_s", "steps"):
        expected = [(end, pytest.approx(r[key], rel=1e-6)) for end, r in zip(ends, records)]
        assert scalars[key] == expected, key  # float32 in the event file
    for tag, sent in records[-1]["bytes_sent"].items():
        assert scalars[f"bytes_sent/{tag}"][-1] == (ends[-1], pytest.approx(sent, rel=1e-6))
    assert "busy_s" not in scalars  # per-rank lists are no scalar
    losses = scalars["step/loss"]
    assert [step for step, _ in losses] == list(range(1, ends[-1] + 1))  # exactly one per optimizer step
    # The epoch's loss is the seed-weighted mean of its steps' losses (all 200 but the last batch).
    first = [v for step, v in losses if step <= ends[0]]
    assert min(first) <= records[0]["loss"] <= max(first)


def test_resume_continues_the_step_count_and_hides_what_it_redoes(tmp_path, capsys):
    _require_tensorboard()
    from graphdist.api import train

    run = tmp_path / "run"
    train(None, epochs=2, run_dir=str(run), tensorboard=True, **TINY)
    steps_2 = sum(r["steps"] for r in _records(run))
    # As after a crash between epoch 2's record and its checkpoint: the checkpoint says 1 epoch.
    import torch

    from graphdist.checkpoint import CHECKPOINT_NAME

    ckpt = torch.load(run / CHECKPOINT_NAME, weights_only=True)
    ckpt["epoch"] = 1
    torch.save(ckpt, run / CHECKPOINT_NAME)
    from graphdist import runlog

    runlog.write_status(run, checkpoint_epoch=1)
    train(None, epochs=3, resume=str(run), tensorboard=True, **TINY)
    records = _records(run)
    assert [r["epoch"] for r in records] == [1, 2, 3]
    losses = _scalars(run)["step/loss"]
    total = sum(r["steps"] for r in records)
    assert total > steps_2
    # Epoch 2's first logging is hidden (TensorBoard's purge), not shown twice next to its redo.
    assert [step for step, _ in losses] == list(range(1, total + 1))
    assert [step for step, _ in _scalars(run)["epoch"]] == [records[0]["steps"], records[0]["steps"] +
                                                             records[1]["steps"], total]


def test_missing_package_is_refused_before_any_worker_starts(tmp_path, monkeypatch, capsys):
    import graphdist.trainers.run as run_module
    from graphdist.cli.train import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))

    def no_worker(*args, **kwargs):
        raise AssertionError("a worker started")

    monkeypatch.setattr(run_module, "worker_main", no_worker)
    run = tmp_path / "run"
    assert main(["--dataset", "synthetic-2000", "--num-workers", "1", "--epochs", "1", "--run-dir", str(run),
                 "--tensorboard"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["graphdist-train: error: --tensorboard needs the tensorboard package: "
                   "pip install 'graphdist[tensorboard]'"]
    assert not run.exists()  # refused before the run directory was made


def test_a_failed_write_warns_once_and_the_log_goes_quiet(tmp_path, caplog):
    _require_tensorboard()
    import errno

    from graphdist.trainers.tensorboard import TensorBoardLog

    (tmp_path / "tensorboard").write_text("a file where the directory should be")
    blocked = TensorBoardLog(tmp_path)  # cannot make the directory: warns, does not raise
    blocked.log_epoch({"epoch": 1, "steps": 3, "loss": 1.0}, [1.0, 1.0, 1.0])
    blocked.close()
    assert blocked.writer is None and blocked.step == 3  # the step count still follows the run

    log = TensorBoardLog(tmp_path / "run")

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    log.writer.add_scalar = disk_full
    log.log_epoch({"epoch": 1, "steps": 2, "loss": 1.0}, [1.0, 1.0])
    log.log_epoch({"epoch": 2, "steps": 2, "loss": 0.5}, [0.6, 0.4])
    log.close()
    warnings = [r.getMessage() for r in caplog.records if "--tensorboard: cannot write" in r.getMessage()]
    assert len(warnings) == 2 and "No space left" in warnings[1]  # one per log: the blocked one, the full disk
