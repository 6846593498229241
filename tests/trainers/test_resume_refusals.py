"""What ``--resume`` refuses before any worker starts (graphdist/resume.py), each in one line, worded for the
command line or the Python API."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphdist import runlog
from graphdist.checkpoint import CHECKPOINT_NAME
from graphdist.config import TrainConfig, replace
from graphdist.resume import ResumeRefused, check_resume


def _run(tmp_path: Path, **options) -> tuple[Path, TrainConfig]:
    """A run directory as a run of ``options`` leaves it after its first epoch's checkpoint."""
    run = tmp_path / "run"
    run.mkdir()
    cfg = TrainConfig(epochs=3, **options)
    runlog.write_config(run, cfg.to_dict())
    (run / CHECKPOINT_NAME).write_bytes(b"")  # checkpoint_epoch reads run.json first
    runlog.write_status(run, checkpoint_epoch=1)
    return run, replace(cfg, resume=str(run))


def test_a_run_that_cannot_continue_bit_for_bit_is_refused_naming_why_and_the_way_on(tmp_path):
    run, cfg = _run(tmp_path, strategy="aggregation", avg_seconds=2.0)
    with pytest.raises(ResumeRefused) as refused:
        check_resume(cfg)
    cli = str(refused.value)
    assert cli.startswith(f"--resume {run}: cannot continue bit for bit: the run has --avg-seconds 2.0")
    assert "wall-clock" in cli and cli.endswith("with --inexact-resume") and "\n" not in cli
    assert refused.value.for_api().args[0].endswith("with inexact_resume=")
    assert check_resume(replace(cfg, inexact_resume=True)) == 1  # asked for: it continues


def test_averaging_every_k_steps_resumes(tmp_path):
    _, cfg = _run(tmp_path, strategy="aggregation", avg_every=3)
    assert check_resume(cfg) == 1


def test_a_changed_option_is_named_with_both_values_in_either_words(tmp_path):
    run, cfg = _run(tmp_path, model="sage")
    with pytest.raises(ResumeRefused) as refused:
        check_resume(replace(cfg, model="gcn"))
    assert str(refused.value) == (f"--resume {run}: cannot change --model gcn (the run has sage: it shapes the "
                                  f"parameters in the checkpoint). Resume without them (--resume {run}), or start "
                                  f"a new run")
    assert refused.value.for_api().args[0].startswith(f"resume='{run}': cannot change model='gcn' (the run has sage")
