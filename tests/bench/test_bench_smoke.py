"""Every script in bench/ runs: tiny arguments, exit 0, the JSON it wrote parses, its table is printed.

Benches are not imported by anything else, so an API change breaks them silently; these tests
run each one as a user would (``python bench/X.py``, repo root as cwd, one OpenMP thread, the
test's own GRAPHDIST_CACHE) on graphs of a few thousand nodes. They check what a bench writes,
never how fast it was: timings belong in bench/, not in tests. Output goes to ``tmp_path``, never
to bench/results/. The DGL peers (``--peers``) are never run here: CI has no peer environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from graphdist.testing import require

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
TIMEOUT_S = 120  # a tiny run takes seconds; this only stops a hang

# The scripts these tests run. A new bench fails test_every_bench_has_a_smoke_test until it has one.
SMOKED = ("bench_binding.py", "bench_checkpoint.py", "bench_cluster.py", "bench_comm.py", "bench_dense.py", "bench_dist_sampler.py", "bench_elastic.py",
          "bench_faults.py", "bench_generator.py", "bench_hetero.py", "bench_link.py", "bench_loaders.py", "bench_models.py", "bench_partition.py",
          "bench_partition_faults.py", "bench_parts.py", "bench_placement.py", "bench_plan.py", "bench_resume.py", "bench_same_runs.py", "bench_sampler.py",
          "bench_scale.py", "bench_simulator.py", "bench_small_allreduce.py", "bench_strategies.py", "bench_sync_cost.py",
          "bench_train.py", "check_cuda.py",
          "hetero_reference.py")  # bench_hetero's reference model: run by its smoke, checked by an oracle below


def _bench(script: str, *args: Any, env: dict[str, str] | None = None,
           timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """Runs ``bench/<script> args`` like a user would; the environment (GRAPHDIST_CACHE included) passes through."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, str(BENCH / script), *map(str, args)], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def _ok(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 0, (f"exit {res.returncode}\n--- stdout\n{res.stdout[-3000:]}\n"
                                 f"--- stderr\n{res.stderr[-3000:]}")


def _read(path: Path, *keys: str) -> dict[str, Any]:
    assert path.exists(), f"the bench did not write {path}"
    doc = json.loads(path.read_text())
    missing = [k for k in keys if k not in doc]
    assert not missing, f"{path.name} lacks top-level keys {missing} (has {sorted(doc)})"
    return doc


def test_every_bench_has_a_smoke_test():
    assert sorted(p.name for p in BENCH.glob("*.py")) == sorted(SMOKED)


def test_bench_generator(tmp_path):
    out = tmp_path / "generator.json"
    res = _bench("bench_generator.py", "--nodes", 2000, "--repeats", 1, "--json", out)
    _ok(res)
    assert "peak GiB" in res.stdout and "edge homophily" in res.stdout
    doc = _read(out, "config", "machine", "summary", "results")
    [row] = doc["results"]
    assert "error" not in row, row
    assert row["num_nodes"] == 2000 and row["num_edges"] > 0 and row["time_s"] > 0
    assert 0.0 <= row["edge_homophily"] <= 1.0  # the first repeat computes the structure figures


def test_bench_partition(tmp_path):
    out = tmp_path / "partition.json"
    methods = ["metis", "random", "super", "stream"]
    res = _bench("bench_partition.py", "--nodes", 2000, "--parts", 2, "--methods", ",".join(methods), "--json", out)
    _ok(res)
    assert "edge bal" in res.stdout
    doc = _read(out, "config", "results")
    # A failing method is a row with "error" and the bench still exits 0: look at every row.
    assert [r["method"] for r in doc["results"]] == methods
    for r in doc["results"]:
        assert "error" not in r, r
        assert r["num_parts"] == 2 and 0.0 <= r["edge_cut"] <= 1.0, r


def test_bench_models(tmp_path):
    out = tmp_path / "models.json"
    res = _bench("bench_models.py", "--iters", 1, "--scale", 0.005, "--out", out)
    _ok(res)
    assert "ms/batch best" in res.stdout
    doc = _read(out, "layers", "hidden", "scale", "rows")
    assert [r["variant"] for r in doc["rows"]] == ["graphdist", "pyg", "naive"]
    assert all(r["ms_best"] > 0 for r in doc["rows"])


def test_bench_dense(tmp_path):
    out = tmp_path / "dense.json"
    res = _bench("bench_dense.py", "--rounds", 1, "--calls", 2, "--scale", 0.01, "--steps", 2, "--step-nodes", 2000,
                 "--out", out)
    _ok(res)
    assert "speed-up" in res.stdout and "aggregation step" in res.stdout
    doc = _read(out, "products", "step", "cpu_capability")
    assert len(doc["products"]) == 6 and all(r["mkl_ms"] > 0 and r["onednn_ms"] > 0 for r in doc["products"])
    # Both kernels compute the same float32 products: a bf16 down-conversion would differ by ~1e-1.
    assert all(r["max_abs_diff"] < 1e-2 for r in doc["products"]), doc["products"]
    assert doc["step"]["mkl_ms"] > 0 and doc["step"]["onednn_ms"] > 0


def test_bench_sampler(tmp_path):
    out = tmp_path / "sampler.json"
    res = _bench("bench_sampler.py", "--nodes", 5000, "--batch-size", 64, "--batches", 3, "--warmup", 1,
                 "--repeats", 2, "--train-nodes", 3000, "--features", 16, "--hidden", 16, "--train-steps", 3,
                 "--overlap-rounds", 2, "--out", out)
    _ok(res)
    assert "M edges/s" in res.stdout and "prefetch overlap" in res.stdout
    doc = _read(out, "meta", "graphdist", "peers", "overlap")
    assert [r["fanouts"] for r in doc["graphdist"]] == [[15, 10, 5], [10, 5]]
    assert all(r["edges_per_s"] > 0 and len(r["rates"]) == 2 for r in doc["graphdist"])
    assert doc["peers"] == []
    assert doc["overlap"]["rounds"] == 2 and doc["overlap"]["step_ms_prefetch"] > 0


@pytest.mark.slow
def test_bench_dist_sampler(tmp_path):
    out = tmp_path / "dist_sampler.json"
    png = tmp_path / "cache.png"
    res = _bench("bench_dist_sampler.py", "--nodes", 5000, "--batches", 3, "--batch-size", 64, "--cache-sizes", 0.1,
                 1.0, "--oracle-batches", 4, "--rounds", 2, "--passes", 2, "--out", out, "--png", png)
    _ok(res)
    assert "M edges/s" in res.stdout and "remote features" in res.stdout and "incl/oracle" in res.stdout
    doc = _read(out, "nodes", "local", "local_pair", "ranks", "rounds")
    assert len(doc["rounds"]) == 2 and all(len(r["ranks"]) == 2 for r in doc["rounds"])
    assert len(doc["local_pair"]) == 2 and doc["local"]["edges_per_s"] > 0
    # the 2 local samplers and the distributed ones alternate in every round, every pass paired
    assert all(len(r["passes"]) == 2 and set(r["passes"][0]) == {"local", "single", "stream", "exchanges"}
               for rd in doc["rounds"] for r in rd["ranks"])
    assert all(0 < r[mode]["vs_pair"] for r in doc["ranks"] for mode in ("single", "stream"))
    assert all(r["exchanges"]["exchanges"] > 0 and r["exchanges"]["cpu_s"] > 0 for r in doc["ranks"])  # the replay
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and png.exists()
    for r in doc["ranks"]:
        assert r["single"]["edges_per_s"] > 0 and r["stream"]["edges_per_s"] > 0, r
        assert r["cache_off"]["rows"] == 0 and r["cache_all"]["rows"] == r["halo_nodes"], r
        for policy in ("degree", "inclusion", "oracle", "ceiling"):
            assert [p["share"] for p in r["policies"][policy]] == [0.1, 1.0], r
            assert all(0 <= p["hit_rate"] <= 1 for p in r["policies"][policy]), r


@pytest.mark.slow
@pytest.mark.slow
def test_bench_train_speed_against_a_baseline_checkout(tmp_path):
    out = tmp_path / "train.json"
    # The repository itself as the "other commit": one alternating pair of 1- and 2-worker runs; this
    # tree's pair also fills the speed table.
    res = _bench("bench_train.py", "--speed", "--baseline", REPO, "--pairs", 1, "--nodes", 3000, "--steps", 2,
                 "--out", out, timeout=240)
    _ok(res)
    assert "medians of 1 alternating pairs" in res.stdout
    assert "Throughput on synthetic-3000" in res.stdout and "seeds/s" in res.stdout
    doc = _read(out, "started", "baseline", "speed")
    runs = doc["baseline"]["runs"]
    assert all(len(runs[tree][w]) == 1 and runs[tree][w][0] > 0 for tree in ("baseline", "this") for w in ("1", "2"))
    rows = doc["speed"]["rows"]
    assert [(r["workers"], r["sync"]) for r in rows] == [(1, "dwbp"), (2, "dwbp")]
    assert all(r["seeds_per_s"] > 0 for r in rows) and doc["speed"]["peer"] is None


@pytest.mark.slow
def test_bench_train_speed_rounds_report_medians_and_peak_memory(tmp_path):
    out = tmp_path / "train.json"
    res = _bench("bench_train.py", "--speed", "--syncs", "", "--rounds", 2, "--nodes", 3000, "--steps", 2,
                 "--out", out, timeout=240)
    _ok(res)
    assert "medians of 2 alternating rounds" in res.stdout and "peak RSS/worker" in res.stdout
    speed = _read(out, "started", "speed")["speed"]
    (row,) = speed["rows"]
    assert (row["workers"], row["sync"], len(row["runs"])) == (1, "dwbp", 2)
    assert row["seeds_per_s"] == pytest.approx(sum(row["runs"]) / 2)  # the median of two runs
    assert row["peak_rss_bytes"] > 100 * 2**20 and speed["peer"] is None


@pytest.mark.slow
def test_bench_train_scaling_writes_rows_and_a_plot(tmp_path):
    out, png = tmp_path / "train.json", tmp_path / "scaling.png"
    res = _bench("bench_train.py", "--scaling", "--workers", 1, 2, "--rounds", 1, "--nodes", 3000, "--steps", 2,
                 "--scaling-rate", "none", "--out", out, "--png", png, timeout=240)
    _ok(res)
    assert "Scaling on synthetic-3000" in res.stdout and png.stat().st_size > 0
    scaling = _read(out, "started", "scaling")["scaling"]
    assert [(r["hosts"], r["workers"]) for r in scaling["rows"]] == [(1, 1), (1, 2)]
    assert all(r["seeds_per_s"] > 0 for r in scaling["rows"]) and scaling["emulated_skipped"] == "--scaling-rate none"


@pytest.mark.slow
def test_bench_train_inference_times_1_and_2_workers(tmp_path):
    out = tmp_path / "train.json"
    res = _bench("bench_train.py", "--inference", "--rounds", 1, "--nodes", 3000, "--out", out, timeout=240)
    _ok(res)
    assert "Layer-wise full-neighbour inference, synthetic-3000" in res.stdout
    results = _read(out, "started", "inference")["inference"]["results"]
    assert sorted(results) == ["this 1w", "this 2w"]
    assert all(r["seconds"] > 0 and r["nodes_per_s"] > 0 and len(r["runs"]) == 1 for r in results.values())


def test_bench_train_accuracy(tmp_path):
    from graphdist.testing.env import find_dataset

    cora = find_dataset("cora")  # the bench takes names: point GRAPHDIST_DATA at the folder it was found in
    out = tmp_path / "train.json"
    res = _bench("bench_train.py", "--accuracy", "--high-degree", "--high-degree-nodes", 800, "--compression",
                 "--compress", "none,int8", "--datasets", "cora", "--workers", 1, "--seeds", 1, "--epochs", 2,
                 "--out", out, env={"GRAPHDIST_DATA": str(cora.parent)})
    _ok(res)
    assert "Test accuracy at the best-validation epoch" in res.stdout
    doc = _read(out, "started", "accuracy", "high_degree", "compression")
    assert "--compress int8" in res.stdout and "within" in res.stdout
    compressed = doc["compression"]["runs"]["cora"]
    assert sorted(compressed) == ["int8", "none"] and all(len(r) == 1 for r in compressed.values())
    assert doc["accuracy"]["recipe"][-2:] == ["--epochs", "2"]
    [acc] = doc["accuracy"]["runs"]["cora"]["1"]
    assert 100 / 7 < acc <= 100  # better than chance over cora's 7 classes, even after 2 epochs
    assert "mean-degree-32 graph" in res.stdout
    runs = doc["high_degree"]["runs"]
    assert sorted(runs) == ["full -1,-1", "sampled 10,10"] and all(len(r) == 1 for r in runs.values())


@pytest.mark.slow
def test_bench_small_allreduce(tmp_path):
    out = tmp_path / "small_allreduce.json"
    res = _bench("bench_small_allreduce.py", "--sizes", "8,512", "--repeats", 2, "--rounds", 2, "--out", out)
    _ok(res)
    assert "speed-up" in res.stdout
    doc = _read(out, "exchange_max_bytes", "rows")
    assert [r["bytes"] for r in doc["rows"]] == [8, 512]
    assert all(len(r["rounds"]["ring"]) == 2 and r["exchange_us"] > 0 for r in doc["rows"])


def test_bench_elastic(tmp_path):
    from graphdist.testing.netns import unavailable_reason

    reason = unavailable_reason()
    require(reason is None, f"bench_elastic: {reason}")
    out, png = tmp_path / "elastic.json", tmp_path / "elastic.png"
    res = _bench("bench_elastic.py", "--dataset", "synthetic-2000", "--parts", 3, "--epochs", 3, "--seeds", 1,
                 "--kill-in", 2, "--rejoin-in", 0, "--out", out, "--png", png, timeout=300)
    _ok(res)
    assert "kill->step s" in res.stdout and "mean test accuracy" in res.stdout
    doc = _read(out, "config", "summary", "rows")
    [row] = doc["rows"]
    assert row["elastic"]["codes"][:2] == [0, 0] and len(row["elastic"]["records"]) == 3
    assert row["elastic"]["kill_to_next_step_s"] > 0 and png.stat().st_size > 0


def test_bench_plan(tmp_path):
    out = tmp_path / "plan.json"
    res = _bench("bench_plan.py", "--dataset", "synthetic-3000", "--rates", "", "--epochs", 2, "--out", out)
    _ok(res)
    assert "predicted s" in res.stdout and "local" in res.stdout
    doc = _read(out, "dataset", "cases")
    local = doc["cases"]["local"]
    assert local["workers"] == 2 and local["predicted_s"] > 0 and local["measured_s"] > 0 and local["plan_wall_s"] > 0


def test_bench_sync_cost(tmp_path):
    out = tmp_path / "sync_cost.json"
    res = _bench("bench_sync_cost.py", "--dataset", "synthetic-3000", "--rounds", 3, "--out", out)
    _ok(res)
    assert "train-thread CPU ms" in res.stdout
    doc = _read(out, "dataset", "rounds", "rows")
    assert sorted(doc["rows"]) == sorted(["ddp", "dwbp", "dwbp --sacp off", "blocking"])
    assert all(r["wall_ms"] > 0 and r["train_thread_cpu_ms"] > 0 for r in doc["rows"].values())


def test_bench_comm(tmp_path):
    from graphdist.testing.netns import unavailable_reason

    reason = unavailable_reason()
    require(reason is None, f"bench_comm: {reason}")
    out = tmp_path / "comm.json"
    res = _bench("bench_comm.py", "--rates", "1gbit", "--sizes-mb", "0.25", "--repeats", 1, "--timeout", 30,
                 "--limit", 90, "--out", out)
    _ok(res)
    assert "tx ring/alg" in res.stdout
    doc = _read(out, "config", "machine", "total_s", "results")
    assert [r["algorithm"] for r in doc["results"]] == ["ring", "hd", "hier"]
    for r in doc["results"]:
        assert r["tx_bytes"] > 0 and r["counted_inter_bytes"] > 0, r  # the sums crossed the emulated link


@pytest.mark.slow
def test_bench_cluster(tmp_path):
    from graphdist.testing.netns import unavailable_reason

    reason = unavailable_reason()
    require(reason is None, f"bench_cluster: {reason}")
    out, png = tmp_path / "cluster.json", tmp_path / "cluster.png"
    res = _bench("bench_cluster.py", "--datasets", "synthetic-3000", "--rates", "1gbit", "--syncs", "dwbp,ddp,sacp",
                 "--hidden", 16, "--steps", 2, "--warmup", 1, "--rounds", 1, "--timeout", 30, "--limit", 90,
                 "--out", out, "--png", png)
    _ok(res)
    assert "hid meas" in res.stdout and "tx/count" in res.stdout and "vs ddp" in res.stdout
    doc = _read(out, "config", "presets", "machine", "total_s", "results")
    assert [(r["dataset"], r["rate"], r["sync"]) for r in doc["results"]] == [
        ("synthetic-3000", "1gbit", "dwbp"), ("synthetic-3000", "1gbit", "ddp"), ("synthetic-3000", "1gbit", "sacp")]
    assert doc["results"][1]["speedup_vs_ddp"] == 1.0
    for r in doc["results"]:
        assert r["steps"] == 2 and r["bytes_by_tag"].get("grad", 0) > 0, r
        assert r["veth_tx_bytes"] > 0, r  # the traffic really crossed the emulated link
    assert png.stat().st_size > 0


def test_bench_loaders(tmp_path):
    out = tmp_path / "loaders.json"
    res = _bench("bench_loaders.py", "--nodes", 3000, "--features", 16, "--steps", 4, "--batch-size", 64,
                 "--rounds", 2, "--out", out)
    _ok(res)
    assert "vs thread" in res.stdout and "of the serial step" in res.stdout
    doc = _read(out, "config", "machine", "sampling_share", "median_epoch_s", "loader_vs_thread")
    assert set(doc["median_epoch_s"]) == {"serial", "thread", "loader"}
    assert all(len(v) == 2 for v in doc["epoch_s"].values()) and 0 < doc["sampling_share"] < 1


def test_check_cuda(tmp_path):
    import torch

    out = tmp_path / "cuda.json"
    if not torch.cuda.is_available():
        res = _bench("check_cuda.py", "--out", out)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "no CUDA device" in res.stdout
        assert not out.exists()
        # The GPU machine is lent rarely: the rehearsal keeps every case's command valid here.
        res = _bench("check_cuda.py", "--as-cpu", "--nodes", 2000, "--epochs", 1, "--out", out, timeout=240)
        _ok(res)
        doc = _read(out, "gpus", "torch", "cases")
        from graphdist.models.dense import native_bf16

        # 9 device layouts and strategies, bf16 on one GPU, bf16 mixed where this CPU has bf16; a baseline, loaders,
        # device sampling, and the mixed job against the GPU alone.
        assert doc["as_cpu"] and doc["complete"] and len(doc["cases"]) == 15 + native_bf16(), doc
        loaders = [c["extra"][c["extra"].index("--loaders") + 1] for c in doc["cases"] if "--loaders" in c["extra"]]
        assert loaders == ["0", "4"], doc
        assert all("vs" in c for c in doc["cases"][-3:]), doc["cases"][-3:]
        assert sum(c["extra"] == ["--precision", "bf16"] for c in doc["cases"]) == 1 + native_bf16(), doc
        assert all(c["ok"] for c in doc["cases"]), doc["cases"]
        assert {c["devices"] for c in doc["cases"]} == {"cpu", "cpu,cpu"}
        return
    res = _bench("check_cuda.py", "--nodes", 2000, "--epochs", 1, "--out", out, timeout=240)
    _ok(res)
    assert '"devices"' in res.stdout
    doc = _read(out, "gpus", "torch", "cases")
    assert doc["cases"] and all(c["ok"] for c in doc["cases"]), doc["cases"]


@pytest.mark.slow
def test_bench_strategies(tmp_path):
    from graphdist.testing.env import find_dataset

    cora = find_dataset("cora")
    out, png = tmp_path / "strategies.json", tmp_path / "strategies.png"
    res = _bench("bench_strategies.py", "--accuracy", "--datasets", "cora", "--seeds", 1, "--epochs-scale", 0.02,
                 "--strategies", "fullgraph s=1", "aggregation random +corr", "--out", out, "--png", png,
                 env={"GRAPHDIST_DATA": str(cora.parent)}, timeout=240)
    _ok(res)
    assert "paired seeds" in res.stdout and png.exists()
    runs = _read(out, "started", "accuracy")["accuracy"]["runs"]["cora"]
    assert sorted(runs) == ["aggregation random +corr, 2 workers", "fullgraph s=1, 2 workers",
                            "reference (1 worker minibatch)"]
    assert all(len(r["acc"]) == 1 and 0 < r["acc"][0] <= 100 and r["curve"] for r in runs.values())
    assert runs["aggregation random +corr, 2 workers"]["label_tvd"][0] < 0.2  # random parts: near the global mix


def test_bench_checkpoint(tmp_path):
    out = tmp_path / "checkpoint.json"
    res = _bench("bench_checkpoint.py", "--quick", "--out", out, "--dir", tmp_path)
    _ok(res)
    (row,) = _read(out, "rows", "rounds")["rows"]
    assert row["rows"] == 10_000 and len(row["runs"]) == 2 and 0 < row["stall_s"] <= row["write_s"], row
    assert "stall_s" in res.stdout and list(tmp_path.glob("graphdist-bench-ckpt-*")) == []


def test_bench_binding(tmp_path):
    from graphdist.testing.env import find_dataset

    require(len(os.sched_getaffinity(0)) >= 2, "bench_binding needs 2 usable cores")
    cora = find_dataset("cora")
    out = tmp_path / "binding.json"
    res = _bench("bench_binding.py", "--dataset", "cora", "--workloads", "minibatch", "aggregation", "--rounds", 1,
                 "--epochs", 2, "--steps", 3, "--out", out, env={"GRAPHDIST_DATA": str(cora.parent)}, timeout=240)
    _ok(res)
    assert "speed-up" in res.stdout
    rows = _read(out, "rows", "cores")["rows"]
    assert [r["workload"] for r in rows] == ["minibatch", "aggregation"]
    assert all(len(r["rounds"]["bound"]) == 1 and r["bound_s"] > 0 and r["unbound_s"] > 0 for r in rows)


def test_bench_placement(tmp_path):
    from graphdist.testing.env import find_dataset

    cora = find_dataset("cora")
    out, png = tmp_path / "placement.json", tmp_path / "placement.png"
    res = _bench("bench_placement.py", "--dataset", "cora", "--pairs", 1, "--epochs", 3, "--batch-size", 16,
                 "--every", 2, "--out", out, "--png", png, env={"GRAPHDIST_DATA": str(cora.parent)}, timeout=240)
    _ok(res)
    assert "fast idle" in res.stdout and png.exists()
    rows = _read(out, "started", "rows", "slowdown")["rows"]
    assert [r["arm"] for r in rows] == ["R=0", "R=2"] and rows[0]["bound"] == 1.5
    assert all(seeds == 140 for r in rows for run in r["runs"] for seeds in run["seeds"])  # cora's train nodes, once


@pytest.mark.slow
def test_bench_faults(tmp_path):
    out = tmp_path / "faults.json"
    res = _bench("bench_faults.py", "--strategies", "minibatch", "--runs", 1, "--nodes", 1500, "--epochs", 2,
                 "--out", out, timeout=400)
    _ok(res)
    assert "resumes differed" in res.stdout
    doc = _read(out, "config", "summary", "runs")
    summary = doc["summary"]["minibatch"]
    assert summary["runs"] == 1 and summary["faults_injected"] == 1, doc["runs"]
    # the guarantees, on this run: it failed, named the rank, left nothing, recovered exactly
    assert summary["named_rank"] == 1 and summary["hangs"] == 0 and summary["processes_left"] == 0, doc["runs"]
    assert summary["checkpoints_torn"] == 0 and summary["resumes_differed"] == 0, doc["runs"]


def test_bench_partition_faults(tmp_path):
    out = tmp_path / "partition_faults.json"
    res = _bench("bench_partition_faults.py", "--dataset", "synthetic-3000", "--parts", 2, "--method", "random",
                 "--runs", 1, "--out", out)
    _ok(res)
    assert "siblings_after_rerun" in res.stdout
    doc = _read(out, "config", "summary", "runs", "writing_s")
    summary = doc["summary"]
    assert summary["runs"] == 1 and summary["rerun_failed"] == 0 and summary["siblings_after_rerun"] == 0, doc
    assert summary["torn (looked complete, failed to verify or unknown)"] == 0, doc


def test_bench_simulator(tmp_path):
    out = tmp_path / "simulator.json"
    # One host only (no --rates), no slow worker (the model's slowdown has unit tests): the profile run,
    # then one validation run.
    res = _bench("bench_simulator.py", "--dataset", "synthetic-3000", "--rates", "", "--repeats", 1, "--epochs", 1,
                 "--slowdown", 1, "--batch-size", 256, "--out", out)
    _ok(res)
    assert "Simulator vs measured" in res.stdout and "worst error" in res.stdout
    rows = _read(out, "started", "profile", "rows")["rows"]
    assert [(r["layout"], r["slowdown"]) for r in rows] == [("1 host x 2", 1.0)]
    assert all(r["measured_s"] > 0 and r["predicted_s"] > 0 for r in rows)


def test_bench_parts(tmp_path):
    from graphdist.testing.env import find_dataset

    cora = find_dataset("cora")
    out = tmp_path / "parts.json"
    # The step-prediction run is bench_simulator's path (its smoke runs it): skipped here.
    res = _bench("bench_parts.py", "--dataset", "cora", "--parts", 4, "--seeds", 1, "--epochs", 1, "--timing-dataset",
                 "", "--out", out, env={"GRAPHDIST_DATA": str(cora.parent)})
    _ok(res)
    assert "4 parts vs 2 parts on 2 workers" in res.stdout
    doc = _read(out, "started", "runs", "mean_diff_points")
    assert len(doc["runs"]["many"]) == len(doc["runs"]["two"]) == 1
    assert 0 < doc["runs"]["many"][0]["test_acc"] <= 100


def test_bench_link(tmp_path):
    from graphdist.testing.env import find_dataset

    cora = find_dataset("cora")
    out = tmp_path / "link.json"
    res = _bench("bench_link.py", "--datasets", "cora", "--seeds", 1, "--epochs", 1, "--workers", 1, 2, "--out", out,
                 env={"GRAPHDIST_DATA": str(cora.parent)})
    _ok(res)
    assert "cora: link prediction" in res.stdout and "Hits@10" in res.stdout
    assert "within 1 point of the PyG reference" in res.stdout and "within 1 point of 1 worker" in res.stdout
    doc = _read(out, "started", "machine", "recipe", "datasets", "checks")
    cora_runs = doc["datasets"]["cora"]
    assert doc["datasets"]["cora"]["epochs"] == 1 and sorted(cora_runs["runs"]) == [
        "graphdist 1 worker", "graphdist 2 workers", "reference"]
    for rows in cora_runs["runs"].values():
        [row] = rows
        # better than chance even after one epoch (9 steps), on both sides of the comparison
        assert row["seed"] == 0 and row["best_epoch"] == 1 and 0.6 < row["test_auc"] <= 1, row
        assert 0 < row["test_mrr"] <= 1 and 0 <= row["test_hits@10"] <= 1 and row["wall_s"] > 0, row
    assert [c["check"] for c in doc["checks"]["cora"]] == [
        "GraphSAGE 1 worker within 1 point of the PyG reference", "graphdist 2 workers within 1 point of 1 worker"]


def test_bench_hetero(tmp_path):
    out = tmp_path / "hetero.json"
    res = _bench("bench_hetero.py", "--quick", "--workers", 1, "--out", out)
    _ok(res)
    assert "paired difference" in res.stdout and "1w - reference" in res.stdout
    doc = _read(out, "started", "machine", "args", "checks", "accuracy")
    [(name, runs)] = [(k, v["runs"]) for k, v in doc["accuracy"]["datasets"].items()]
    assert name == "synthetic-hetero-2000" and sorted(runs) == ["reference", "rgcn 1w", "sage 1w"]
    for rows in runs.values():
        [row] = rows
        assert row["seed"] == 0 and 0 < row["test_acc"] <= 1 and len(row["history"]) == 2, row
    assert [c["check"] for c in doc["checks"]] == ["1w - reference", "R-GCN - SAGE (1w)"]
    assert doc["accuracy"]["datasets"]["synthetic-hetero-2000"]["fanouts"] == [25, 20]  # the accuracy default


def test_hetero_reference_batches_compute_the_full_graph_model():
    import torch

    sys.path.insert(0, str(BENCH))
    from hetero_reference import _layers, receptive_field

    from graphdist.models.hetero import RGCN
    from graphdist.testing import typed_random_graph

    g = typed_random_graph(200, seed=2)
    model = RGCN(g.num_features, 8, g.num_classes, 2, dropout=0.5, schema=g.schema).eval()
    ids = torch.arange(g.num_nodes)
    node_type, type_index, rel = g.schema.node_type(ids), g.schema.type_index(ids), g.edge_type.long()
    whole = _layers(model, model.encoder(g.x, node_type, type_index), [(g.edge_index(), rel, g.num_nodes)] * 2)
    seeds = torch.tensor([5, 3, 17, 0])
    nodes, hops = receptive_field(g.indptr, g.indices, rel, seeds, 2, torch.full((g.num_nodes,), -1))
    batch = _layers(model, model.encoder(g.x[nodes], node_type[nodes], type_index[nodes]), hops)
    assert nodes.numel() < g.num_nodes  # a strict subgraph, so the test can tell
    torch.testing.assert_close(batch, whole[seeds])


def test_bench_scale(tmp_path):
    out, png = tmp_path / "scale.json", tmp_path / "scale.png"
    res = _bench("bench_scale.py", "--sizes", 2000, 4000, "--methods", "stream", "--workers", 2, "--steps", 1,
                 "--train-from", 4000, "--out", out, "--png", png)
    _ok(res)
    assert "peak PSS GiB" in res.stdout and "growth generate" in res.stdout and "ogbn-papers100M" in res.stdout
    doc = _read(out, "rows", "growth", "papers100m", "machine")
    assert [r["nodes"] for r in doc["rows"]] == [2000, 4000]
    for row in doc["rows"]:
        gen, part = (row["phases"][k] for k in ("generate", "partition/stream"))
        assert gen["edges"] > 0 and gen["peak_rss_bytes"] > 0 and gen["disk_bytes"] > 0
        assert part["peak_rss_bytes"] > 0 and part["disk_bytes"] > 0
    assert "train/stream" not in doc["rows"][0]["phases"]  # --train-from 4000
    train = doc["rows"][1]["phases"]["train/stream"]
    assert train["steps"] == 1 and train["seeds_per_s"] > 0 and train["peak_pss_bytes"] > 0
    assert set(doc["growth"]) == {"generate", "partition/stream", "train/stream"} and png.exists()


def test_bench_resume(tmp_path):
    out = tmp_path / "resume.json"
    combo = "minibatch-dwbp-none-ring-off-fp32-node"
    res = _bench("bench_resume.py", "--only", combo, "--limit", 1, "--out", out)
    _ok(res)
    assert "pairwise subset" in res.stdout and "equal 1, differ 0, refused 0, error 0" in res.stdout
    doc = _read(out, "started", "machine", "space", "valid", "pairwise", "mode", "summary", "rows")
    assert doc["mode"] == "full" and doc["valid"] > doc["pairwise"] > 0
    [row] = doc["rows"]
    assert row["id"] == combo and row["outcome"] == "equal", row
    assert sorted(row["runs_s"]) == ["first epoch", "resume", "straight"]
    assert (tmp_path / "resume-workers.log").exists()  # the workers' banners went there, not into the table


def test_bench_same_runs_compares_records_and_catches_a_difference(tmp_path):
    out = tmp_path / "same.json"
    res = _bench("bench_same_runs.py", "--before", "HEAD", "--cases", "tiny", "--out", out, timeout=300)
    doc = _read(out, "before", "rows")
    # The working tree against its own last commit: equal unless this checkout has uncommitted training changes.
    assert [r["case"] for r in doc["rows"]] == ["tiny"] and res.returncode == (0 if doc["rows"][0]["same"] else 1)
    if os.environ.get("CI") == "true":  # a clean clone: the tree is its commit, so the runs are the same
        assert doc["rows"][0]["same"], doc["rows"][0]["differences"]
    import torch

    sys.path.insert(0, str(BENCH))
    from bench_same_runs import compare

    for side, (loss, weight) in {"a": (0.5, 1.0), "b": (0.5, 1.0), "c": (0.25, 2.0)}.items():
        (tmp_path / side).mkdir()
        (tmp_path / side / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "loss": loss, "epoch_time_s": weight})
                                                       + "\n")
        torch.save({"model": {"w": torch.full((2,), weight)}}, tmp_path / side / "checkpoint.pt")
    assert compare(tmp_path / "a", tmp_path / "b") == []
    assert compare(tmp_path / "a", tmp_path / "c") == ["epoch 1 loss: 0.5 before, 0.25 after", "parameter w differs"]

