"""A full disk (a small tmpfs): partitioning and training fail in one clear line and leave nothing partial.

The previous checkpoint stays loadable, the metrics never end in half a line, no temporary file is
left, and once there is room again ``--resume`` continues the run. Needs root (mount).
"""

from __future__ import annotations

import json

import pytest

from graphdist.checkpoint import CHECKPOINT_NAME, load_checkpoint
from graphdist.cli.partition import main as partition_main
from graphdist.cli.train import main as train_main
from graphdist.testing.env import fill_disk, small_disk

TINY = ["--hidden", "256", "--fanouts", "5,5", "--batch-size", "200", "--log-interval", "1000", "--timeout", "30",
        "--num-workers", "1", "--dataset", "synthetic-2000"]


def _leftovers(root):
    return sorted(p.name for p in root.rglob("*") if ".tmp" in p.name or ".new-" in p.name or ".old-" in p.name)


def test_partitioning_onto_a_full_disk_is_refused_or_fails_leaving_nothing(tmp_path, capsys, monkeypatch):
    import partition.api as api
    from graphdist.data import load_graph
    from partition.api import partition

    graph = load_graph("synthetic-2000")  # about 0.3 MiB of partition files
    with small_disk(tmp_path / "disk", 128) as disk:
        # The CLI refuses before partitioning when even the features and edges cannot fit.
        assert partition_main(["--dataset", "synthetic-2000", "--num-parts", "2", "--out", str(disk / "p")]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "--out" in err and "needs at least" in err and "is free there" in err
        # The API refuses up front as well (graphdist-train partitioning on the fly).
        with pytest.raises(ValueError, match="needs at least .* is free there"):
            partition(graph, 2, method="random", out=disk / "p")
        # One whose estimate passes but fails while writing says so and removes its temporary directory.
        monkeypatch.setattr(api, "check_disk_fits", lambda out, graph: None)
        with pytest.raises(OSError, match=r"could not write partition directory .*no space left on device.*"
                                          r"nothing was written"):
            partition(graph, 2, method="random", out=disk / "p")
        assert list(disk.iterdir()) == []


def test_checkpoint_onto_a_full_disk_keeps_the_previous_one_and_resume_continues(tmp_path, capsys):
    with small_disk(tmp_path / "disk", 4096) as disk:
        run = disk / "run"
        assert train_main(["--epochs", "1", "--run-dir", str(run), *TINY]) == 0
        size = (run / CHECKPOINT_NAME).stat().st_size  # ~0.7 MiB: 60k parameters and Adam's moments
        before = (run / CHECKPOINT_NAME).read_bytes()
        filler = fill_disk(disk, leave_bytes=size // 2)
        capsys.readouterr()

        assert train_main(["--resume", str(run), "--epochs", "2"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert "no space left on device" in err[0] and str(run) in err[0], err
        assert "--resume" in err[-1]  # the hint: the last checkpoint is intact
        assert (run / CHECKPOINT_NAME).read_bytes() == before
        assert load_checkpoint(run / CHECKPOINT_NAME)["epoch"] == 1
        for line in (run / "metrics.jsonl").read_text().splitlines():
            json.loads(line)
        assert _leftovers(run) == []

        filler.unlink()
        assert train_main(["--resume", str(run), "--epochs", "2"]) == 0
        assert load_checkpoint(run / CHECKPOINT_NAME)["epoch"] == 2
        assert [json.loads(r)["epoch"] for r in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
