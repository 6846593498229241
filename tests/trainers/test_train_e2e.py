"""End to end: the CLI and the API on cora with 1-2 workers (short runs)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
FAST = ["--hidden", "32", "--fanouts", "5,5", "--batch-size", "70", "--log-interval", "1000", "--timeout", "30"]


def _cli(*args, timeout=240, env=None):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "graphdist.cli.train", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=full_env)


def _main(*args) -> int:
    """``graphdist-train args`` in this process (the workers fork from the warm fork server: no torch
    import per run); for tests that read the run directory, not the output."""
    from graphdist.cli.train import main

    return main([str(a) for a in args])


def _params(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoint.pt", weights_only=True)["model"]


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory):
    """cora split with metis into 1 and 2 parts, once for the module."""
    from graphdist.data import load_graph
    from graphdist.testing.env import find_dataset
    from partition.api import partition

    graph = load_graph(find_dataset("cora"))
    root = tmp_path_factory.mktemp("parts")
    return {n: partition(graph, n, method="metis", out=root / f"cora-{n}", seed=0) for n in (1, 2)}


def test_cli_two_workers_writes_run_dir(tmp_path, cora_parts):
    run = tmp_path / "run"
    # --sync dwbp: the per-layer sync whose records (hidden fraction, SACP's bytes per layer) this reads
    assert _main("--partitions", cora_parts[2], "--num-workers", "2", "--epochs", "2", "--run-dir", run,
                 "--sync", "dwbp", "--plots", *FAST) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2]
    for key in ("loss", "val_acc", "test_acc", "epoch_time_s", "seeds_per_s", "bytes_sent", "hidden_fraction"):
        assert key in records[-1], key
    assert records[-1]["bytes_sent"].get("grad", 0) > 0
    # SACP (on by default under dwbp): this epoch's gradient bytes per layer and scheme, per rank
    by_layer = records[-1]["grad_bytes_by_layer"]
    assert len(by_layer) == 2 and all(k.rsplit(":", 1)[1] in ("dense", "sfb") for k in by_layer[0]), by_layer
    assert (run / "checkpoint.pt").exists() and (run / "config.yaml").exists()
    assert (run / "loss_acc.png").stat().st_size > 0 and (run / "time_breakdown.png").stat().st_size > 0
    torch.load(run / "checkpoint.pt", weights_only=True)  # loadable without pickle


@pytest.mark.parametrize("workers", [2])  # one worker: test_run_dir.py, in-process
def test_resume_is_bit_identical(tmp_path, cora_parts, workers):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    common = ["--partitions", str(cora_parts[workers]), "--num-workers", str(workers), *FAST]
    assert _main(*common, "--epochs", "2", "--run-dir", straight) == 0
    assert _main(*common, "--epochs", "1", "--run-dir", resumed) == 0
    assert _main("--resume", resumed, "--epochs", "2") == 0
    a, b = _params(straight), _params(resumed)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    epochs = [json.loads(l)["epoch"] for l in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]
    assert not list(straight.glob("*.png"))  # the suite's GRAPHDIST_PLOTS=0 (tests/conftest.py) reaches the config


def test_predict_keyed_by_original_ids(tmp_path, cora_parts):
    run = tmp_path / "run"
    assert _main("--partitions", cora_parts[2], "--num-workers", "2", "--epochs", "1", "--run-dir", run, "--no-plots",
                 *FAST) == 0
    assert not list(run.glob("*.png"))  # --no-plots
    assert _main("--predict", run) == 0
    out = np.load(run / "predictions.npz")
    assert out["orig_id"].tolist() == list(range(2708))
    assert out["pred"].shape == (2708,) and out["embedding"].shape[0] == 2708
    assert out["logits"].shape == (2708, 7)
    assert set(np.unique(out["pred"])) <= set(range(7))


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_failing_worker_ends_job_naming_rank(tmp_path, cora_parts, mode):
    from graphdist.api import train
    from graphdist.launch import WorkerFailed
    from graphdist.models import GraphSAGE
    from graphdist.testing.faults import FailingModel

    model = FailingModel(GraphSAGE(1433, 16, 7, num_layers=2), rank=1, mode=mode, at_call=2)
    timeout = 120  # each collective's; the job takes seconds (1.6-6.6 s alone, the fork server's start included)
    start = time.monotonic()
    with pytest.raises(WorkerFailed, match="^worker rank 1 (raised|exited)"):
        train(model, cora_parts[2], num_workers=2, epochs=2, fanouts=(5, 5), hidden=16, batch_size=70,
              timeout=timeout, run_dir=str(tmp_path / "run"))
    # The failure ended the job: it was over before rank 0, waiting on the dead rank, could have given up
    # on its own (its timeout's clock starts later than this one, so a slow start only narrows the margin).
    assert time.monotonic() - start < timeout


def test_custom_pyg_gat_model_trains(tmp_path, cora_parts):
    from graphdist.api import train
    from graphdist.testing.models import PygGAT

    res = train(PygGAT(1433, 8, 7, heads=2), cora_parts[2], num_workers=2, epochs=3, fanouts=(5, 5),
                batch_size=70, lr=0.01, run_dir=str(tmp_path / "run"), timeout=30)
    assert [r["epoch"] for r in res.history] == [1, 2, 3]
    # It learns: the loss falls and the test accuracy (sampled full-neighbour inference: the
    # model has no layer_forward) is well above chance (1/7).
    assert res.history[-1]["loss"] < res.history[0]["loss"]
    assert res.best["test_acc"] > 0.3, res.best


@pytest.mark.parametrize(
    "args, message",
    [
        (["--num-workers", "3"], "has 2 parts but --num-workers is 3"),
        (["--fanouts", "5,5,5"], "--fanouts has 3 entries but --layers is 2"),
    ],
)
def test_cli_errors_with_partitions(cora_parts, args, message):
    res = _cli("--partitions", str(cora_parts[2]), "--epochs", "1", *args)
    assert res.returncode == 2  # refused before any worker started
    assert message in res.stderr
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_cli_error_missing_directory(tmp_path):
    res = _cli("--partitions", str(tmp_path / "nope"))
    assert res.returncode == 2 and "no such directory" in res.stderr and "Traceback" not in res.stderr


def test_cli_error_bad_config_key(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("epochs: 2\nlearning_rate: 0.1\n")
    res = _cli("--config", str(cfg))
    assert res.returncode == 2 and "unknown key 'learning_rate'" in res.stderr and "Traceback" not in res.stderr


def test_ctrl_c_stops_all_workers_and_keeps_checkpoint(tmp_path, cora_parts):
    import signal

    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "graphdist.cli.train", "--partitions", str(cora_parts[2]), "--num-workers", "2",
           "--epochs", "500", "--run-dir", str(run), *FAST]
    # A terminal's Ctrl-C sends SIGINT to the whole foreground process group.
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoint.pt").exists():  # epoch 1 is saved
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no epoch finished in 120 s"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "interrupted" in err and f"continue with: graphdist-train --resume {run}" in err
    # multiprocessing's resource tracker leaves on its own once its pipe closes: allow it a moment.
    deadline = time.monotonic() + 15
    while True:
        left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert left == [], f"processes left behind: {left}"
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ckpt["epoch"] >= 1


def test_cli_error_cuda_device_on_cpu_build(cora_parts):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the error case cannot happen here")
    res = _cli("--partitions", str(cora_parts[2]), "--devices", "cuda:0")
    assert res.returncode == 2 and "has no CUDA device" in res.stderr and "Traceback" not in res.stderr
