"""Cluster spec validation, parts -> workers, part adjacency in the partition format, graphdist-plan."""

from pathlib import Path

import pytest

from placement.assign import PlacementError, assign_parts, cut_between_workers, optimize_plan
from placement.cluster import ClusterSpecError, load_cluster, parse_cluster


def test_cluster_spec_parses_and_orders_ranks(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("hosts:\n"
                    "  - {name: a, link: 10gbit, workers: [{device: cpu, threads: 4, memory: 16GiB}]}\n"
                    "  - {name: b, link: 1gbit, workers: [{device: 'cuda:0', memory: 80GiB, speed: 5}, {device: cpu}]}\n"
                    "local_link: 50gbit\nburst: 64KiB\n")
    spec = load_cluster(path)
    assert spec.burst_bytes == 65536 and parse_cluster({"hosts": [{"workers": [{}]}], "burst": 1500}).burst_bytes == 1500
    assert [w.device for w in spec.workers] == ["cpu", "cuda:0", "cpu"]
    assert spec.workers[0].threads == 4 and spec.workers[1].speed == 5.0 and spec.workers[0].memory_bytes == 16 * 2**30
    assert spec.link_bps(0, 1) == 1e9 and spec.link_bps(1, 2) == 50e9  # slower host link; one host: local link
    fed = parse_cluster({"hosts": [{"workers": [{"device": "cuda:0", "loaders": 8}, {}]}]})
    assert [w.loaders for w in fed.workers] == [8, 0] and "cuda:0 x1 threads, 8.0 GiB, speed 1, 8 loaders" in fed.describe()


def test_cluster_spec_reports_every_mistake_one_line_each(tmp_path):
    doc = {"hosts": [{"name": "a", "workers": [{"device": "gpu", "threads": 0, "memory": "lots", "colour": 1,
                                                "loaders": -1}]},
                     {"name": "a", "link": "fast", "workers": []}], "extra": 1,
           "burst": "lots"}
    with pytest.raises(ClusterSpecError) as err:
        parse_cluster(doc)
    lines = str(err.value).splitlines()
    for expected in ("unknown key 'extra'", "workers[0]: unknown key 'colour'", "workers[0].device", "workers[0].threads",
                     "workers[0].loaders: expected an integer >= 0",
                     "workers[0].memory", "hosts[1].name: 'a' appears twice", "hosts[1].link", "hosts[1].workers", ": burst:"):
        assert sum(expected in line for line in lines) == 1, (expected, lines)
    (tmp_path / "bad.yaml").write_text("hosts: [\n")
    with pytest.raises(ClusterSpecError, match="not valid YAML"):
        load_cluster(tmp_path / "bad.yaml")
    with pytest.raises(ClusterSpecError, match="cannot read"):
        load_cluster(tmp_path / "missing.yaml")


def test_assignment_respects_memory_and_keeps_connected_parts_together():
    # Two clusters of parts, {0, 1, 2} and {3, 4, 5}, joined by one weak edge.
    edges = [[0] * 6 for _ in range(6)]
    for group in ((0, 1, 2), (3, 4, 5)):
        for p in group:
            for q in group:
                edges[p][q] = 10 if p != q else 50
    edges[2][3] = edges[3][2] = 1
    assignment = assign_parts([1] * 6, [1] * 6, edges, speeds=[1, 1], capacity=[10, 10])
    assert assignment == [[0, 1, 2], [3, 4, 5]]
    assert cut_between_workers(assignment, edges) == 2
    # Memory caps: worker 0 holds at most 2 parts, so worker 1 takes the rest.
    capped = assign_parts([1] * 6, [1] * 6, edges, speeds=[1, 1], capacity=[2, 10])
    assert len(capped[0]) <= 2 and sorted(capped[0] + capped[1]) == list(range(6))
    # Speed: a worker 2x faster gets about twice the work.
    fast = assign_parts([1] * 6, [1] * 6, edges, speeds=[2, 1], capacity=[10, 10])
    assert len(fast[0]) == 4
    with pytest.raises(PlacementError, match="part .* fits no worker: worker 1 .* lacks"):
        assign_parts([1, 1], [5, 5], [[0, 0], [0, 0]], speeds=[1, 1], capacity=[4, 4.5])
    with pytest.raises(PlacementError, match="repartition with --num-parts 3"):
        assign_parts([1, 1], [1, 1], [[0, 0], [0, 0]], speeds=[1, 1, 1], capacity=[9, 9, 9])


def test_optimize_plan_shares_follow_throughput_and_explain():
    plan, why = optimize_plan([50, 50, 50, 50], [80] * 4, [1.0] * 4, [[9, 1, 0, 0], [1, 9, 0, 0], [0, 0, 9, 1],
                              [0, 0, 1, 9]], ["cpu", "cuda:0"], [1.0, 3.0], [10.0, 10.0], batch_size=40)
    assert [r.batch_share for r in plan.ranks] == [10, 30]
    assert sorted(p for r in plan.ranks for p in r.parts) == [0, 1, 2, 3]
    assert "rank 1 (cuda:0)" in why[1].line() and "share 30" in why[1].line()


def test_part_edges_written_and_recomputed_for_older_directories(tmp_path):
    import json

    from graphdist.testing import random_graph
    from partition.api import part_edges, partition

    graph = random_graph(300, avg_degree=4, seed=0)
    out = partition(graph, 3, method="random", out=tmp_path / "p", seed=0)
    written = part_edges(out)
    assert sum(map(sum, written)) == graph.num_edges
    meta = json.loads((Path(out) / "meta.json").read_text())
    assert [row[p] for p, row in enumerate(written)] == [
        p["num_inner_edges"] - p["num_cut_edges"] for p in meta["parts"]]
    del meta["part_edges"]  # a directory from before part_edges existed
    (Path(out) / "meta.json").write_text(json.dumps(meta))
    assert part_edges(out) == written


def test_plan_cli(tmp_path, capsys):
    from graphdist.cli.plan import main
    from graphdist.testing import random_graph
    from partition.api import partition

    out = partition(random_graph(400, avg_degree=4, seed=1), 4, method="metis", out=tmp_path / "p", seed=0)
    assert main(["--partitions", str(out), "--num-workers", "2", "--batch-size", "64", "--no-profile", "--json",
                 str(tmp_path / "plan.json")]) == 0
    text = capsys.readouterr().out
    assert "rank 0 (cpu): parts" in text and "rank 1 (cpu)" in text and "edges cut between workers" in text
    spec = tmp_path / "c.yaml"
    spec.write_text("hosts: [{name: a, workers: [{device: cpu, memory: 1KiB}, {device: cpu, memory: 1KiB}]}]\n")
    assert main(["--partitions", str(out), "--cluster", str(spec)]) == 2
    assert "fits no worker" in capsys.readouterr().err
    assert main(["--partitions", str(tmp_path / "nothing")]) == 2


def test_train_groups_more_parts_than_workers_and_refuses_a_plan_that_cannot_fit(tmp_path, capsys):
    """graphdist-train on 4 parts with 2 workers plans before any worker starts: a spec whose workers
    cannot hold the parts exits 2 naming the part, the worker and the shortfall, and writes no run."""
    from graphdist.cli.train import main
    from graphdist.config import TrainConfig
    from graphdist.testing import random_graph
    from graphdist.trainers.run import plan_job
    from partition.api import partition

    out = partition(random_graph(400, avg_degree=4, seed=1, feature_dim=4), 4, method="metis", out=tmp_path / "p",
                    seed=0)
    plan = plan_job(str(out), TrainConfig(batch_size=64), 2)
    assert sorted(p for r in plan.ranks for p in r.parts) == [0, 1, 2, 3] and len(plan.ranks) == 2
    with pytest.raises(ValueError, match="has 4 parts but the job has 8 workers; repartition with --num-parts 8"):
        plan_job(str(out), TrainConfig(batch_size=64), 8)
    spec = tmp_path / "c.yaml"
    spec.write_text("hosts: [{name: a, workers: [{device: cpu, memory: 1KiB}, {device: cpu, memory: 1KiB}]}]\n")
    run = tmp_path / "run"
    assert main(["--partitions", str(out), "--cluster", str(spec), "--epochs", "1", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "fits no worker: worker" in err and "lacks" in err and "KiB" in err, err
    assert not (run / "metrics.jsonl").exists()
