"""graphdist-plan: the recipe as graphdist-train reads it, a profile measured here when none is given, a cluster of
any size predicted from it, and a recommendation that weighs accuracy (issue 48)."""

from __future__ import annotations

import json

import pytest

from graphdist.cli.plan import MAX_AGGREGATION_TVD, main, recommend


def _profile_doc(partitions: str = "") -> dict:
    """A 2-worker profile whose workers send a lot per seed: minibatch pays for a slow link, aggregation does not."""
    part = {"sample": [0.001, 1e-5], "gather": [0.0, 1e-5], "compute": [0.002, 5e-5]}
    measures = {"bytes": {"sample": [0.0, 5_000.0], "feature": [0.0, 40_000.0]}, "wait": [0.0, 0.0], "exchanges": 6,
                "rows": [[0.0, 8.0], [0.0, 1.0]], "sync_wait": 0.001,
                "linears": [["layers.0.lin", 128, 200], ["layers.1.lin", 16, 256]], "param_bytes": 119360}
    return {"key": {"partitions": partitions}, "costs": [[0.0, 1e-4]] * 2, "shares": [100, 100],
            "parts": [part, part], "measures": [measures, measures]}


def _spec(tmp_path, hosts: int, per_host: int, link: str = "100mbit") -> str:
    spec = tmp_path / f"spec-{hosts}x{per_host}.yaml"
    spec.write_text("hosts:\n" + "".join(
        f"  - {{name: h{h}, link: {link}, workers: [{', '.join(['{device: cpu}'] * per_host)}]}}\n"
        for h in range(hosts)))
    return str(spec)


def test_plan_measures_its_own_profile_when_none_is_given(tmp_path, capsys):
    from graphdist.testing import random_graph
    from partition.api import partition

    out = partition(random_graph(600, avg_degree=6, seed=1, feature_dim=8), 2, method="metis", out=tmp_path / "p",
                    seed=0)
    saved, doc = tmp_path / "prof.json", tmp_path / "plan.json"
    assert main(["--partitions", str(out), "--num-workers", "2", "--hidden", "16", "--fanouts", "5,5",
                 "--batch-size", "64", "--save-profile", str(saved), "--json", str(doc)]) == 0
    text = capsys.readouterr().out
    assert f"profile: measured here in" in text and str(saved) in text and "measured: each worker's costs" in text
    res = json.loads(doc.read_text())
    # The profile is of the recipe given here, and it is what the prediction came from.
    key = json.loads(saved.read_text())["key"]
    assert (key["hidden"], key["fanouts"], key["workers"]) == (16, [5, 5], 2)
    assert res["measured"] and set(res["simulated"]) >= {"minibatch", "aggregation"}
    assert res["sync"]["mode"] == "ddp" and "one host" in res["sync"]["why"]  # what --sync auto takes here
    assert all("predicted step" in line for line in res["lines"])


def test_a_4_worker_cluster_is_predicted_from_a_2_worker_profile_scaling_its_bytes_by_the_cut(tmp_path, capsys):
    from graphdist.testing import random_graph
    from partition.api import partition

    out = partition(random_graph(800, avg_degree=6, seed=1, feature_dim=8), 4, method="metis", out=tmp_path / "p",
                    seed=0)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(_profile_doc(str(out))))
    doc = tmp_path / "plan.json"
    assert main(["--partitions", str(out), "--cluster", _spec(tmp_path, 2, 2), "--profile", str(profile),
                 "--json", str(doc)]) == 0
    text = capsys.readouterr().out
    res = json.loads(doc.read_text())
    scaling = res["scaling"]
    assert not scaling["as_measured"] and scaling["profiled_workers"] == 2 and len(res["shares"]) == 4
    # 4 workers cut more edges than the profile's 2: each sends more of its edges' traffic.
    assert scaling["planned_cut"] > scaling["profiled_cut"] > 0
    assert scaling["bytes_scale"] == pytest.approx(scaling["planned_cut"] / scaling["profiled_cut"])
    assert "scaled: times by each worker's speed" in text and "modelled: the links" in text
    # Across hosts --sync auto is modelled as it decides: the faster of the two predictions.
    assert res["sync"]["mode"] in ("ddp", "dwbp") and set(res["sync"]["step_s"]) == {"ddp", "dwbp"}


@pytest.mark.parametrize("method, recommended", [("metis", "minibatch"), ("random", "aggregation")])
def test_aggregation_is_recommended_only_on_parts_with_the_graphs_label_mix(tmp_path, capsys, method, recommended):
    from partition.api import partition

    # synthetic-3000 is homophilous: METIS parts follow its communities and their labels (TVD well above
    # 0.1); random parts carry the whole graph's mix.
    out = partition("synthetic-3000", 2, method=method, out=tmp_path / "p", seed=1)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(_profile_doc(str(out))))
    doc = tmp_path / "plan.json"
    assert main(["--partitions", str(out), "--cluster", _spec(tmp_path, 2, 1, "20mbit"), "--profile", str(profile),
                 "--json", str(doc)]) == 0
    text = capsys.readouterr().out
    res = json.loads(doc.read_text())
    sim = res["simulated"]
    assert sim["aggregation"]["epoch_s"] < sim["minibatch"]["epoch_s"]  # faster either way on this link
    assert res["recommendation"]["strategy"].split()[0] == recommended
    if method == "metis":
        assert max(res["label_tvd"]) > MAX_AGGREGATION_TVD
        assert "aggregation is not recommended" in text and "--partition-method random or super" in text
    else:
        assert max(res["label_tvd"]) <= MAX_AGGREGATION_TVD
        assert "trades accuracy for time" in text
    assert "x minibatch's" in text  # each alternative's gain beside its time


def test_recommend_refuses_aggregation_where_the_label_mix_is_unknown_and_names_staleness_as_a_trade():
    sim = {"minibatch": {"epoch_s": 2.0}, "aggregation": {"epoch_s": 1.0}}
    unknown = recommend(sim, [None, None], {"task": "link"})
    assert unknown["strategy"] == "minibatch" and "unknown" in unknown["why_not_aggregation"]
    stale = recommend({"fullgraph --staleness 0": {"epoch_s": 2.0}, "fullgraph --staleness 1": {"epoch_s": 1.0}},
                      [0.5, 0.5], {})
    assert stale["strategy"] == "fullgraph --staleness 1" and stale["trades_accuracy"]
    assert "trades accuracy for time" in stale["words"]


def test_plan_reads_the_recipe_as_graphdist_train_does_and_refuses_what_no_step_depends_on(tmp_path, capsys):
    from graphdist.cli.plan import parse
    from graphdist.testing import random_graph
    from partition.api import partition

    out = str(partition(random_graph(200, seed=1), 2, method="random", out=tmp_path / "p", seed=0))
    assert main(["--partitions", out, "--no-profile", "--epochs", "3"]) == 2
    assert "--epochs does not change a step's time" in capsys.readouterr().err
    assert main(["--partitions", out, "--no-profile", "--hiden", "3"]) == 2
    assert "did you mean '--hidden'" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("hidden: 48\nfanouts: [7, 3]\nepochs: 9\nlr: 0.5\nnum_workers: 2\n")
    _, cfg = parse(["--partitions", out, "--from-run", str(run)])
    assert (cfg.hidden, cfg.fanouts) == (48, (7, 3))
    _, cfg = parse(["--partitions", out, "--from-run", str(run), "--hidden", "32"])  # a flag overrides the run's
    assert cfg.hidden == 32
    assert main(["--partitions", out, "--from-run", str(tmp_path / "nothing")]) == 2
    assert "not a graphdist run directory" in capsys.readouterr().err


def test_loader_processes_in_the_spec_feed_a_sampling_bound_worker(tmp_path, capsys):
    """A worker's ``loaders`` in the cluster spec (or --loaders) spread its loading path in the prediction."""
    from graphdist.testing import random_graph
    from partition.api import partition

    out = partition(random_graph(600, avg_degree=6, seed=1, feature_dim=8), 2, method="metis", out=tmp_path / "p",
                    seed=0)
    doc = _profile_doc(str(out))
    for part in doc["parts"]:  # sampling-bound: loading 10x the compute per seed
        part["sample"] = [0.0, 5e-4]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(doc))
    steps = {}
    for loaders in (0, 4):
        spec = tmp_path / f"spec{loaders}.yaml"
        spec.write_text("hosts:\n  - {name: h0, link: 10gbit, workers: [" + ", ".join(
            [f"{{device: cpu, loaders: {loaders}}}"] * 2) + "]}\n")
        res_path = tmp_path / f"plan{loaders}.json"
        assert main(["--partitions", str(out), "--cluster", str(spec), "--profile", str(profile),
                     "--json", str(res_path)]) == 0
        steps[loaders] = json.loads(res_path.read_text())["simulated"]["minibatch"]["step_s"]
    assert "4 loaders" in capsys.readouterr().out  # the spec as read
    assert steps[4] < 0.5 * steps[0], steps
