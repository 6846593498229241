"""``--sync auto``: the decision from injected probe times, the options that pin it, and a resume that keeps it."""

import subprocess
import sys
from pathlib import Path

import pytest

from graphdist.sync.choice import MARGIN, able_modes, choose_sync

REPO = Path(__file__).resolve().parents[2]


def test_a_cheap_link_gets_ddps_buckets_and_a_slow_one_per_layer_sync():
    both = ("ddp", "dwbp")
    assert choose_sync(both, one_host=True).chosen == "ddp"  # loopback: nothing to hide
    # Across hosts the probe steps decide: per-layer sync (SACP's factors, overlap) where it pays...
    slow = choose_sync(both, one_host=False, step_s={"ddp": 0.120, "dwbp": 0.040})
    assert slow.chosen == "dwbp" and "40.0 ms" in slow.reason and "120.0 ms" in slow.reason
    # ... and DDP's buckets where they beat per-layer sync by more than the margin (a tie is per-layer's,
    # the default before auto: across hosts auto is never slower than it by more than the probe's noise).
    tie = choose_sync(both, one_host=False, step_s={"ddp": 0.100 * (1 - MARGIN / 2), "dwbp": 0.100})
    assert tie.chosen == "dwbp" and "within" in tie.reason
    assert choose_sync(both, one_host=False, step_s={"ddp": 0.010, "dwbp": 0.030}).chosen == "ddp"
    # No probe batches (a strategy without them) across hosts: the per-layer sync stays.
    assert choose_sync(both, one_host=False).chosen == "dwbp"


def test_options_only_per_layer_sync_honours_pin_the_choice():
    cpu = ("cpu",)
    assert able_modes("auto", "none", "auto", None, "auto", cpu) == ("ddp", "dwbp")
    assert able_modes("auto", "int8", "auto", None, "auto", cpu) == ("dwbp",)  # DDP sends no int8
    assert able_modes("auto", "bf16", "auto", None, "auto", cpu) == ("dwbp",)  # torch's bf16 hook: NCCL only
    assert able_modes("auto", "bf16", "auto", None, "auto", ("cuda:0", "cuda:1")) == ("ddp", "dwbp")
    assert able_modes("auto", "none", "on", None, "auto", cpu) == ("dwbp",)
    assert able_modes("auto", "none", "auto", "layers.0.lin=sfb", "auto", cpu) == ("dwbp",)
    assert able_modes("auto", "none", "auto", None, "hd", cpu) == ("dwbp",)  # DDP keeps its own ring
    assert able_modes("ddp", "none", "auto", None, "auto", cpu) == ("ddp",)
    assert choose_sync(("dwbp",), one_host=True).chosen == "dwbp"


def test_the_config_accepts_auto_and_what_its_candidates_read():
    from graphdist.config import TrainConfig, read_options

    cfg = TrainConfig()
    assert cfg.sync == "auto"
    assert {"sacp", "allreduce", "compress"} <= read_options(TrainConfig(sacp="off"))
    TrainConfig(compress="int8")  # dwbp sends it: accepted, and auto will choose dwbp


def test_resolve_sync_decides_once_and_a_resume_keeps_the_decision():
    from graphdist.comm.topology import Topology
    from graphdist.config import TrainConfig
    from graphdist.trainers.base import WorkerContext, resolve_sync

    ctx = WorkerContext(rank=0, world_size=2, cfg=TrainConfig(num_workers=2), partitions=None, plan=None,
                        topology=Topology.single_host(2))
    assert resolve_sync(ctx) == "ddp" and ctx.decisions["sync"] == "ddp" and "one host" in ctx.decisions["sync_why"]
    # A resumed run starts from the checkpoint's decisions: across hosts now, it does not probe again.
    resumed = WorkerContext(rank=0, world_size=2, cfg=TrainConfig(num_workers=2), partitions=None, plan=None,
                            topology=Topology(hosts=((0,), (1,))), decisions={"sync": "dwbp"})
    assert resolve_sync(resumed, probe=lambda modes: pytest.fail("probed again")) == "dwbp"
    explicit = WorkerContext(rank=0, world_size=2, cfg=TrainConfig(num_workers=2, sync="blocking"), partitions=None,
                             plan=None)
    assert resolve_sync(explicit) == "blocking" and "sync" not in explicit.decisions


def test_a_resumed_run_trains_on_with_the_sync_its_start_chose(tmp_path):
    import os
    import re

    from graphdist.testing.env import find_dataset

    find_dataset("cora")  # skips (fails under CI=true) without the data
    run = tmp_path / "run"
    common = [sys.executable, "-m", "graphdist.cli.train", "--dataset", "cora", "--num-workers", "2",
              "--batch-size", "140", "--hidden", "16", "--run-dir", str(run), "--timeout", "60"]
    # Two emulated hosts: the start times probe steps of both candidates (trainers/probes.time_syncs).
    env = {**os.environ, "GRAPHDIST_TOPOLOGY": "2x1"}
    first = subprocess.run([*common, "--epochs", "1"], capture_output=True, text=True, cwd=REPO, timeout=240, env=env)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-3000:]
    # dwbp's row names SACP and the allreduce before the reason: "dwbp, SACP, allreduce ring, chosen by ..."
    chosen = re.search(r"(ddp|dwbp)[^\n]*, chosen by --sync auto \(probe steps dwbp [0-9.]+ ms, ddp [0-9.]+ ms", out)
    assert chosen, out[-3000:]
    # Resumed on one host, where a fresh run would take ddp without probing: the run's own choice, and
    # its reason, are kept.
    resumed = subprocess.run([sys.executable, "-m", "graphdist.cli.train", "--resume", str(run), "--epochs", "2"],
                             capture_output=True, text=True, cwd=REPO, timeout=240,
                             env={k: v for k, v in os.environ.items() if k != "GRAPHDIST_TOPOLOGY"})
    again = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, again[-3000:]
    assert f"sync        {chosen.group(1)}" in again and chosen.group(0) in again and "one host:" not in again, again[-3000:]


def test_a_timed_choice_is_probed_again_when_the_step_time_moves_and_a_chosen_one_is_kept():
    from graphdist.comm.topology import Topology
    from graphdist.config import TrainConfig
    from graphdist.sync.choice import RECHECK_FACTOR, needs_recheck
    from graphdist.trainers.base import WorkerContext, recheck_sync, resolve_sync

    assert not needs_recheck(0.02, 0.02 * RECHECK_FACTOR * 0.99) and needs_recheck(0.02, 0.02 * RECHECK_FACTOR * 1.01)
    ctx = WorkerContext(rank=0, world_size=2, cfg=TrainConfig(num_workers=2), partitions=None, plan=None,
                        topology=Topology(hosts=((0,), (1,))))
    times = {"ddp": 0.010, "dwbp": 0.030}  # a fast link: DDP's buckets
    probes = []

    def probe(modes):
        probes.append(tuple(modes))
        return dict(times)

    assert resolve_sync(ctx, probe=probe) == "ddp" and ctx.decisions["sync_timed"]
    assert recheck_sync(ctx, 0.020, probe) is None and ctx.decisions["sync_ref_step_s"] == 0.020  # the reference
    assert recheck_sync(ctx, 0.024, probe) is None and len(probes) == 1  # within the factor: not probed
    times.update(ddp=0.200, dwbp=0.080)  # the link slowed: per-layer sync now wins
    assert recheck_sync(ctx, 0.090, probe) == "dwbp" and len(probes) == 2
    assert ctx.decisions["sync"] == "dwbp" and "checked again after the step moved from 20.0 to 90.0 ms" in \
        ctx.decisions["sync_why"] and "sync_ref_step_s" not in ctx.decisions
    # A resume reuses the decision as it stands (no probe at the start), and re-checks from there.
    resumed = WorkerContext(rank=0, world_size=2, cfg=TrainConfig(num_workers=2), partitions=None, plan=None,
                            topology=Topology(hosts=((0,), (1,))), decisions=dict(ctx.decisions))
    assert resolve_sync(resumed, probe=lambda modes: pytest.fail("probed again")) == "dwbp"
    # Not timed (one host, or a mode given): never re-checked.
    one = WorkerContext(rank=0, world_size=2, cfg=TrainConfig(num_workers=2), partitions=None, plan=None,
                        topology=Topology.single_host(2))
    resolve_sync(one)
    assert recheck_sync(one, 0.01, probe) is None and recheck_sync(one, 1.0, probe) is None and len(probes) == 2


def _switch_body(rank: int, world_size: int) -> None:
    import torch

    from graphdist.sync import make_sync

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    x = torch.full((3, 4), float(rank + 1))

    def step(sync):
        model.zero_grad()
        sync.begin_step(3)
        sync.model(x).sum().backward()
        sync.finish()
        return model.weight.grad.clone()

    ddp = make_sync("ddp", model)
    first = step(ddp)
    ddp.close()  # DDP's reducer hooks go with its wrapper: the per-layer sync alone syncs from here
    assert ddp.model is model
    dwbp = make_sync("dwbp", model)
    second = step(dwbp)
    # the mean of the ranks' equal-seed gradients, both times (a stale DDP hook would fail or double it)
    assert torch.allclose(first, second) and torch.allclose(first[0], torch.full((4,), 1.5 * 3)), (first, second)
    dwbp.close()


def test_a_sync_rebuilt_mid_run_replaces_ddps_hooks():
    from graphdist.testing import launch

    launch(_switch_body, 2, timeout=90)


def test_a_run_whose_steps_slow_down_checks_its_sync_choice_again_and_saves_it(tmp_path):
    import os
    import re

    import torch

    from graphdist.testing.env import find_dataset

    find_dataset("cora")  # skips (fails under CI=true) without the data
    run = tmp_path / "run"
    # Two emulated hosts (a timed choice); both ranks 4x slower from epoch 3: epoch 2 is the reference.
    env = {**os.environ, "GRAPHDIST_TOPOLOGY": "2x1", "GRAPHDIST_TEST_SLOWDOWN": "0:4.0@3, 1:4.0@3"}
    done = subprocess.run([sys.executable, "-m", "graphdist.cli.train", "--dataset", "cora", "--num-workers", "2",
                           "--batch-size", "32", "--hidden", "16", "--epochs", "4", "--eval-every", "0",
                           "--run-dir", str(run), "--timeout", "60"],
                          capture_output=True, text=True, cwd=REPO, timeout=240, env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    line = re.search(r"epoch 3: --sync auto: (ddp|dwbp)( kept)? \(checked again after the step moved from "
                     r"([0-9.]+) to ([0-9.]+) ms: probe steps dwbp [0-9.]+ ms, ddp [0-9.]+ ms", out)
    assert line and float(line.group(4)) > 1.5 * float(line.group(3)), out[-3000:]
    # warm-up, then the reference; the last epoch is never checked (no epoch left to use it)
    assert all(f"epoch {e}: --sync auto" not in out for e in (1, 2, 4)), out[-3000:]
    decisions = torch.load(run / "checkpoint.pt", weights_only=True)["extra"]["decisions"]
    assert decisions["sync"] == line.group(1) and decisions["sync_why"].startswith("checked again")
