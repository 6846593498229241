"""The simulator's model on hand-made costs: closed forms where the model has them."""

import dataclasses

import pytest

from placement.shares import LinearCost
from placement.profiled import costs_from_profile, fullgraph_costs_from_profile
from placement.simulator import (FullGraphCosts, Layout, ModelShape, Pipelined, Wire, WorkerCosts, simulate,
                                 simulate_fullgraph)


def _worker(load_ms=4.0, compute_ms=10.0, sent_per_seed=1000.0, rows_per_seed=8.0):
    per = lambda ms: LinearCost(0.0, ms / 1e3 / 100)  # noqa: E731 - ms at a share of 100
    return WorkerCosts(sample=per(load_ms / 2), gather=per(load_ms / 2), compute=per(compute_ms),
                       sent_bytes=LinearCost(0.0, sent_per_seed), rows=(LinearCost(0.0, rows_per_seed),
                                                                        LinearCost(0.0, 1.0)))


SHAPE = ModelShape(linears=(("layers.0.lin", 256, 512), ("layers.1.lin", 16, 256)),
                   param_bytes=4 * (256 * 513 + 16 * 257))


def test_one_host_step_is_the_larger_of_loading_and_compute():
    w = _worker()
    pred = simulate([w, w], [100, 100], Layout.one_host(2), steps=7, prefetch=True)
    assert pred.step_s == pytest.approx(0.010) and pred.epoch_s == pytest.approx(0.070)
    serial = simulate([w, w], [100, 100], Layout.one_host(2), steps=7, prefetch=False)
    assert serial.step_s == pytest.approx(0.014)


def test_loader_processes_spread_a_workers_loading():
    w = _worker(load_ms=30.0, compute_ms=10.0)  # sampling-bound: 30 ms of loading to 10 of compute
    alone = simulate([w, w], [100, 100], Layout.one_host(2, cores=16), steps=1)
    fed = simulate([w, w], [100, 100], Layout.one_host(2, cores=16), steps=1, loaders=[3, 3])
    assert alone.step_s == pytest.approx(0.030) and fed.step_s == pytest.approx(0.010)  # 30 ms over 3 loaders
    # one worker with loaders, the other without: the job waits for the one without
    assert simulate([w, w], [100, 100], Layout.one_host(2, cores=16), steps=1, loaders=[3, 0]).step_s == \
        pytest.approx(0.030)
    # the loaders' CPU still counts against the machine's cores: 2 x 40 ms on 2 cores
    assert simulate([w, w], [100, 100], Layout.one_host(2, cores=2), steps=1, loaders=[3, 3]).step_s == \
        pytest.approx(0.040)


def test_cores_bound_all_workers_of_a_machine():
    w = _worker()
    pred = simulate([w, w], [100, 100], Layout.one_host(2, cores=1), steps=1)
    assert pred.step_s == pytest.approx(0.028) and pred.bottleneck == "cores"  # (4 + 10) ms x 2 on one core


def test_a_slow_worker_stretches_its_own_path():
    w = _worker()
    pred = simulate([w, w], [100, 100], Layout.one_host(2), steps=1, slowdown=[1.0, 2.0])
    assert pred.per_worker_s == pytest.approx([0.010, 0.020]) and pred.step_s == pytest.approx(0.020)


def test_a_bound_slow_worker_serialises_its_loading_and_training_on_its_core():
    # Prefetch overlaps 4 ms of loading with 10 ms of compute; stretched 2x that is 20 ms, but on
    # its own core (bound: 2 workers fill 2 cores) both threads' 14 ms of CPU take turns: 28 ms.
    w = _worker()
    bound = simulate([w, w], [100, 100], Layout.one_host(2, cores=2), steps=1, slowdown=[1.0, 2.0])
    assert bound.per_worker_s == pytest.approx([0.014, 0.028])
    assert Layout.one_host(2, cores=2).bound(1) and not Layout.one_host(2, cores=4).bound(1)
    spare = simulate([w, w], [100, 100], Layout.one_host(2, cores=4), steps=1, slowdown=[1.0, 2.0])
    assert spare.per_worker_s == pytest.approx([0.010, 0.020])  # a core to spare: the overlap holds
    # Emulated hosts of one worker each are not bound, whatever the machine's cores.
    hosts = Layout.hosts_of([1, 1], 1e9, cores=2, shared_machine=True)
    assert not hosts.bound(0) and not hosts.bound(1)


def test_a_bound_worker_takes_turns_with_its_other_threads_too():
    # Profiled with a loading thread: 4 ms loading and 8 ms training CPU, 2 ms more in the process's
    # other threads (gloo's). Bound and 2x slower: (4 + 8) x 2 stretched, plus the 2 ms unstretched.
    ms = lambda v: LinearCost(0.0, v / 1e3 / 100)  # noqa: E731 - ms at a share of 100
    piped = lambda other: Pipelined(step=ms(14.0), load_cpu=ms(4.0), compute_cpu=ms(8.0),  # noqa: E731
                                    compute_wall=ms(10.0), other_cpu=ms(other))
    for other, slow_s in ((2.0, 0.026), (0.0, 0.024)):
        w = dataclasses.replace(_worker(), pipelined=piped(other))
        pred = simulate([w, w], [100, 100], Layout.one_host(2, cores=2), steps=1, slowdown=[1.0, 2.0],
                        profiled_layout=Layout.one_host(2, cores=2))
        assert pred.per_worker_s == pytest.approx([0.014, slow_s])


def test_on_the_profiled_layout_the_step_is_the_profiled_one():
    # Both ranks stepped at 10 ms; rank 0 waited 1 ms for the gradient exchange, rank 1 (which
    # arrived first) 2 ms. The exchange alone costs the least wait: counting the larger one for
    # rank 0 too would predict 11 ms.
    ms = lambda v: LinearCost(0.0, v / 1e3 / 100)  # noqa: E731 - ms at a share of 100
    workers = [dataclasses.replace(_worker(), pipelined=Pipelined(step=ms(10.0), load_cpu=ms(3.0), compute_cpu=ms(5.0),
                                                                   compute_wall=ms(7.0), sync_wait_s=wait))
               for wait in (0.001, 0.002)]
    lay = Layout.one_host(2, cores=4)
    pred = simulate(workers, [100, 100], lay, steps=1, profiled_layout=lay)
    assert pred.step_s == pytest.approx(0.010) and pred.sync_s == pytest.approx(0.001)


def test_cross_host_traffic_over_the_uplink():
    w = _worker(sent_per_seed=10_000.0)  # 1 MB per step at a share of 100
    lay = lambda bps: Layout.hosts_of([1, 1], link_bps=bps, latency_s=0.0)  # noqa: E731
    slow, slower = (simulate([w, w], [100, 100], lay(r), steps=1) for r in (100e6, 50e6))
    assert slow.parts["network_s"] == pytest.approx(0.08) and slower.parts["network_s"] == pytest.approx(0.16)
    assert slow.bottleneck == "network" and slower.step_s > slow.step_s
    # Half of each worker's partners on its own host: half the bytes cross.
    four = simulate([w] * 4, [100] * 4, Layout.hosts_of([2, 2], link_bps=100e6, latency_s=0.0), steps=1)
    assert four.parts["network_s"] == pytest.approx(2 * 2 / 3 * 0.08)


def test_gradient_exchange_overlaps_backward_under_dwbp_only():
    w = _worker(compute_ms=30.0, rows_per_seed=1000.0)  # K large: SACP keeps every layer dense
    lay = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0)
    dense = 4 * (256 * 512 + 256) + 4 * (16 * 256 + 16)
    blocking = simulate([w, w], [100, 100], lay, steps=1, model=SHAPE, overlap=False)
    assert blocking.sync_s == pytest.approx(8 * dense / 100e6, rel=0.02)  # 2 (P-1)/P = 1 of the bytes
    dwbp = simulate([w, w], [100, 100], lay, steps=1, model=SHAPE, overlap=True)
    assert 0 < dwbp.sync_s < blocking.sync_s


def test_dwbp_sends_a_middle_layer_after_its_weight_gradient_half_way_through_its_backward():
    # Three Linears, the middle one holding nearly all the work and bytes: its transfer starts
    # after its weight-gradient GEMM (graphdist.sync.reorder), half its backward, so the exchange
    # runs past backward by its whole transfer less half of backward (20 ms of 30 ms compute).
    per = lambda ms: LinearCost(0.0, ms / 1e3 / 100)  # noqa: E731
    w = WorkerCosts(sample=per(1.0), gather=per(1.0), compute=per(30.0), sent_bytes=LinearCost(0.0, 0.0),
                    rows=(LinearCost(0.0, 1000.0),) * 3)
    linears = (("layers.0.lin", 2, 2), ("layers.1.lin", 1024, 1024), ("layers.2.lin", 2, 1024))
    shape = ModelShape(linears=linears, param_bytes=sum(4 * (o * i + o) for _, o, i in linears))
    lay = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0)
    blocking = simulate([w, w], [100, 100], lay, steps=1, model=shape, overlap=False, sacp=False)
    dwbp = simulate([w, w], [100, 100], lay, steps=1, model=shape, overlap=True, sacp=False)
    assert dwbp.sync_s == pytest.approx(blocking.sync_s - 0.010, abs=2e-4)


def test_a_links_burst_carries_the_first_bytes_of_each_steps_gradients_at_once():
    w = _worker(compute_ms=30.0, rows_per_seed=1000.0)
    dense = 4 * (256 * 512 + 256) + 4 * (16 * 256 + 16)
    plain, burst = (Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0, burst_bytes=b) for b in (0.0, 64 * 1024))
    a = simulate([w, w], [100, 100], plain, steps=1, model=SHAPE, overlap=False)
    b = simulate([w, w], [100, 100], burst, steps=1, model=SHAPE, overlap=False)
    assert a.sync_s - b.sync_s == pytest.approx(8 * 64 * 1024 / 100e6)  # the bucket's bytes cost nothing
    assert b.sync_s == pytest.approx(8 * (dense - 64 * 1024) / 100e6, rel=0.02)


def test_the_bucket_refills_only_while_the_link_idles():
    # 3 ms of compute and no sampling traffic: from the last step's gradients to this step's
    # first (the end of backward under blocking), the link idles 3 ms and refills 3 ms of its
    # 64 KiB (5.2 ms at 100 Mbit/s); with 8 KB of sampling traffic a step, 0.64 ms less.
    lay = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0, burst_bytes=64 * 1024)
    plain = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0)
    for sent, idle in ((0.0, 0.003), (80.0, 0.003 - 8 * 8000 / 100e6)):
        w = _worker(compute_ms=3.0, sent_per_seed=sent, rows_per_seed=1000.0)
        a, b = (simulate([w, w], [100, 100], x, steps=1, model=SHAPE, overlap=False) for x in (plain, lay))
        assert a.sync_s - b.sync_s == pytest.approx(idle), sent


def test_the_bucket_refills_through_the_slowest_workers_stretched_compute():
    # 3 ms of compute refill 3 ms of the bucket; with one worker 2x slower its backward ends
    # 3 ms later, and the link idles (and refills) that much longer: 6 ms, capped by the
    # bucket's 5.2 ms at 100 Mbit/s.
    lay = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0, burst_bytes=64 * 1024)
    plain = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0)
    w = _worker(compute_ms=3.0, sent_per_seed=0.0, rows_per_seed=1000.0)
    a, b = (simulate([w, w], [100, 100], x, steps=1, model=SHAPE, overlap=False, slowdown=[1.0, 2.0])
            for x in (plain, lay))
    assert a.sync_s - b.sync_s == pytest.approx(8 * 64 * 1024 / 100e6)


def test_sacp_sends_factors_when_poseidons_rule_picks_them():
    few = _worker(rows_per_seed=0.2)  # K = 20 rows: 20 (256 + 512) < 2 * 256 * 512 / 2
    lay = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0)
    dense = simulate([few, few], [100, 100], lay, steps=1, model=SHAPE, overlap=False, sacp=False)
    sfb = simulate([few, few], [100, 100], lay, steps=1, model=SHAPE, overlap=False, sacp=True)
    assert sfb.sync_s < dense.sync_s / 5


def test_compression_moves_fewer_bytes_and_sacp_weighs_its_factors_against_them():
    lay = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0)
    int8 = Wire(grad=1 + 4 / 512)
    many = _worker(compute_ms=30.0, rows_per_seed=1000.0)  # dense either way
    fp32 = simulate([many, many], [100, 100], lay, steps=1, model=SHAPE, overlap=False)
    half = simulate([many, many], [100, 100], lay, steps=1, model=SHAPE, overlap=False, wire=Wire(2.0, 2.0))
    assert half.sync_s == pytest.approx(fp32.sync_s / 2, rel=0.02)
    # K = 60 rows: float32 factors (60 x 768 x 4 bytes) beat the float32 ring (256 x 512 x 4) but
    # not int8's (256 x 512 x 1.008): the layer goes dense, as the sync's rule decides.
    mid = _worker(rows_per_seed=0.6)
    exact = simulate([mid, mid], [100, 100], lay, steps=1, model=SHAPE, overlap=False, sacp=True)
    quarter = simulate([mid, mid], [100, 100], lay, steps=1, model=SHAPE, overlap=False, sacp=True, wire=int8)
    dense = simulate([mid, mid], [100, 100], lay, steps=1, model=SHAPE, overlap=False, sacp=False)
    dense_int8 = simulate([mid, mid], [100, 100], lay, steps=1, model=SHAPE, overlap=False, sacp=False, wire=int8)
    assert exact.sync_s < dense.sync_s / 2 and quarter.sync_s == pytest.approx(dense_int8.sync_s)
    from graphdist.sync.sacp_capture import sacp_choice
    assert sacp_choice([60, 60], 256, 512) == "sfb" and sacp_choice([60, 60], 256, 512, 2, 4.0, 1 + 4 / 512) == "dense"


def test_aggregation_has_no_per_step_traffic_and_averages_every_k_steps():
    w = _worker(sent_per_seed=10_000.0)
    lay = Layout.hosts_of([1, 1], link_bps=10e6, latency_s=0.0)
    mini = simulate([w, w], [100, 100], lay, steps=10, model=SHAPE)
    agg = simulate([w, w], [100, 100], lay, steps=10, model=SHAPE, strategy="aggregation", avg_every=10)
    assert agg.parts["network_s"] == 0 and agg.epoch_s < mini.epoch_s
    assert agg.sync_s == pytest.approx(8 * SHAPE.param_bytes / 10e6 / 10)
    with pytest.raises(ValueError, match="fullgraph"):
        simulate([w, w], [100, 100], lay, steps=1, strategy="fullgraph")
    # --avg-overlap: an average shorter than a step is hidden; a longer one shows what outlasts the step.
    hidden = simulate([w, w], [100, 100], Layout.hosts_of([1, 1], link_bps=1e9, latency_s=0.0), steps=10,
                      model=SHAPE, strategy="aggregation", avg_every=10, avg_overlap=True)
    assert hidden.sync_s == 0.0
    slow = Layout.hosts_of([1, 1], link_bps=1e5, latency_s=0.0)
    plain = simulate([w, w], [100, 100], slow, steps=10, model=SHAPE, strategy="aggregation", avg_every=10)
    overlapped = simulate([w, w], [100, 100], slow, steps=10, model=SHAPE, strategy="aggregation", avg_every=10,
                          avg_overlap=True)
    average = 8 * SHAPE.param_bytes / 1e5
    assert overlapped.sync_s == pytest.approx((average - (plain.step_s - plain.sync_s)) / 10)
    assert plain.step_s - overlapped.step_s == pytest.approx((plain.step_s - plain.sync_s) / 10)


def test_profiles_without_measures_are_refused_in_one_line():
    with pytest.raises(ValueError, match="run --placement profiled again"):
        costs_from_profile({"parts": [{"sample": [0, 1e-5], "gather": [0, 1e-5], "compute": [0, 1e-5]}]})


def _profile_doc():
    part = {"sample": [0.001, 1e-5], "gather": [0.0, 1e-5], "compute": [0.002, 5e-5]}
    measures = {"bytes": {"sample": [0.0, 50.0], "feature": [0.0, 400.0]}, "wait": [0.0, 0.0], "exchanges": 6,
                "rows": [[0.0, 8.0], [0.0, 1.0]], "sync_wait": 0.001,
                "linears": [["layers.0.lin", 128, 200], ["layers.1.lin", 16, 256]], "param_bytes": 119360}
    return {"key": {}, "costs": [[0.0, 1e-4]] * 2, "shares": [100, 100], "parts": [part, part],
            "measures": [measures, measures]}


def test_describe_scales_the_profile_and_names_the_dominant_assumption(tmp_path, capsys):
    import json

    from graphdist.cli.plan import main
    from graphdist.testing import random_graph
    from partition.api import partition

    out = partition(random_graph(300, avg_degree=4, seed=1, feature_dim=100), 2, method="metis", out=tmp_path / "p",
                    seed=0)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(_profile_doc()))
    base = ["--partitions", str(out), "--describe", "1000000,20000000,100", "--train-fraction", "0.1",
            "--machines", "4", "--link", "1gbit", "--batch-size", "1024", "--reference", "5"]
    assert main(base) == 2 and "--describe needs --profile" in capsys.readouterr().err
    doc = tmp_path / "plan.json"
    assert main([*base, "--profile", str(profile), "--json", str(doc)]) == 0
    text = capsys.readouterr().out
    assert "dominant assumption:" in text and "reference" in text and "minibatch" in text
    res = json.loads(doc.read_text())
    assert res["steps"] == 98 and set(res["sensitivity"]) == {"speedup", "edge_cut", "link_bps"}
    assert res["sensitivity"]["speedup"] > 1.0  # halving the speed never helps
    faster = tmp_path / "fast.json"
    assert main([*base, "--profile", str(profile), "--speedup", "4", "--json", str(faster)]) == 0
    fast = json.loads(faster.read_text())["predictions"]["minibatch"]["epoch_s"]
    assert fast < res["predictions"]["minibatch"]["epoch_s"]
    assert main([*base[:3], "1,2", "--profile", str(profile)]) == 2
    assert "expected N,E,F" in capsys.readouterr().err


def _fullgraph(compute_s=0.5, rows=(20_000, 10_000), halo_wait_s=0.0):
    """Two ranks: rank 0 sends ``rows[0]`` boundary rows to rank 1, rank 1 ``rows[1]`` to rank 0."""
    return [FullGraphCosts(compute_s=compute_s, send_rows=(0, rows[0]), widths=(64, 64), inner=50_000,
                           halo_wait_s=halo_wait_s),
            FullGraphCosts(compute_s=compute_s, send_rows=(rows[1], 0), widths=(64, 64), inner=50_000,
                           halo_wait_s=halo_wait_s)]


def test_fullgraph_exchange_is_boundary_rows_times_width_each_way_per_layer():
    # Per layer forward: host 0's uplink carries 20k rows, host 1's 10k; backward the other way.
    # Each exchange lasts as long as its busiest link: 20k rows both times.
    lay = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0)
    one_layer_each_way = 8.0 * 4 * 20_000 * 64 / 100e6
    s0 = simulate_fullgraph(_fullgraph(halo_wait_s=0.01), lay, staleness=0)
    assert s0.parts["halo_s"] == pytest.approx(2 * 2 * one_layer_each_way)
    local = 2 * 2 * 8.0 * 4 * 20_000 * 64 / Layout.one_host(2).local_bps
    # Blocking: the profiled wait (kept) plus what the slower link adds to it.
    assert s0.step_s == pytest.approx(0.5 + 0.01 + 4 * one_layer_each_way - local)
    assert s0.steps == 1 and s0.epoch_s == s0.step_s and s0.bottleneck == "network"
    bf16 = simulate_fullgraph(_fullgraph(halo_wait_s=0.01), lay, staleness=0, wire=Wire(halo=2.0))
    assert bf16.parts["halo_s"] == pytest.approx(s0.parts["halo_s"] / 2)  # --compress bf16: 2 bytes a value


def test_stale_fullgraph_overlaps_the_exchange_with_compute():
    lay = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0)
    halo = 4 * 8.0 * 4 * 20_000 * 64 / 100e6  # 1.64 s
    compute_bound = simulate_fullgraph(_fullgraph(compute_s=2.0), lay, staleness=1)
    network_bound = simulate_fullgraph(_fullgraph(compute_s=0.2), lay, staleness=1)
    assert compute_bound.step_s == pytest.approx(2.0) and compute_bound.bottleneck == "worker 0"
    assert network_bound.step_s == pytest.approx(halo) and network_bound.bottleneck == "network"
    s0 = simulate_fullgraph(_fullgraph(compute_s=2.0), lay, staleness=0)
    assert s0.step_s == pytest.approx(2.0 + halo, rel=1e-3)


def test_stale_exchange_costs_its_cpu_work_where_no_core_is_spare():
    # The exchange's own CPU work (the least profiled wait: 0.1 s) cannot hide behind compute on
    # a machine whose cores all compute; with a spare core it does.
    costs = [FullGraphCosts(compute_s=1.0, send_rows=(0, 1_000), widths=(64,), inner=50_000, halo_wait_s=0.3),
             FullGraphCosts(compute_s=1.0, send_rows=(1_000, 0), widths=(64,), inner=50_000, halo_wait_s=0.1)]
    busy = Layout.hosts_of([1, 1], link_bps=1e9, cores=2, shared_machine=True, latency_s=0.0)
    spare = Layout.hosts_of([1, 1], link_bps=1e9, cores=4, shared_machine=True, latency_s=0.0)
    assert simulate_fullgraph(costs, busy, staleness=1).step_s == pytest.approx(1.1)
    assert simulate_fullgraph(costs, spare, staleness=1).step_s == pytest.approx(1.0)
    # One cores value stands for every machine (a spec without core counts: unbounded).
    assert simulate_fullgraph(costs, Layout(host_of=(0, 1), link_bps=(1e9, 1e9), latency_s=0.0),
                              staleness=1).step_s == pytest.approx(1.0)


def test_duplex_slows_only_links_that_carry_both_directions():
    both = _fullgraph(rows=(20_000, 20_000))
    one_way = _fullgraph(rows=(20_000, 0))  # rank 1 sends nothing: each exchange uses one direction
    full, half = (Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0, duplex=d, duplex_stream=d) for d in (1.0, 0.5))
    assert simulate_fullgraph(both, half).parts["halo_s"] == pytest.approx(2 * simulate_fullgraph(both, full).parts["halo_s"])
    assert simulate_fullgraph(one_way, half).parts["halo_s"] == pytest.approx(simulate_fullgraph(one_way, full).parts["halo_s"])
    # Staleness 1 keeps its exchanges back to back: the stream share applies.
    stream = Layout.hosts_of([1, 1], link_bps=100e6, latency_s=0.0, duplex=0.5, duplex_stream=1.0)
    assert simulate_fullgraph(both, stream, staleness=1).parts["halo_s"] == pytest.approx(
        simulate_fullgraph(both, full, staleness=1).parts["halo_s"])


def test_fullgraph_refuses_other_layouts_and_minibatch_profiles():
    with pytest.raises(ValueError, match="profile on as many workers"):
        simulate_fullgraph(_fullgraph(), Layout.one_host(4))
    with pytest.raises(ValueError, match="--strategy fullgraph --placement profiled"):
        fullgraph_costs_from_profile({"parts": [{}], "measures": [{}]})


def test_plan_predicts_fullgraph_from_a_fullgraph_profile_with_the_spec_duplex(tmp_path, capsys):
    import json

    from graphdist.cli.plan import main
    from graphdist.testing import random_graph
    from partition.api import partition

    out = partition(random_graph(300, avg_degree=4, seed=1, feature_dim=16), 2, method="metis", out=tmp_path / "p",
                    seed=0)
    probe = {"compute_s": 0.05, "halo_wait_s": 0.01, "sync_wait_s": 0.0, "widths": [64, 64], "inner": 150,
             "linears": [["a", 64, 16], ["b", 64, 64], ["c", 7, 64]], "param_bytes": 4 * (64 * 17 + 64 * 65 + 7 * 65)}
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"key": {}, "costs": [[0.06, 0.0]] * 2, "shares": [1, 1], "parts": None,
                                   "measures": None, "fullgraph": [{**probe, "send_rows": [0, 100_000]},
                                                                   {**probe, "send_rows": [100_000, 0]}]}))
    epochs = {}
    for duplex in (1.0, 0.5):
        spec = tmp_path / f"spec-{duplex}.yaml"
        spec.write_text(f"duplex: {duplex}\nhosts:\n" + "".join(
            f"  - {{name: h{i}, link: 100mbit, workers: [{{device: cpu}}]}}\n" for i in range(2)))
        doc = tmp_path / f"plan-{duplex}.json"
        assert main(["--partitions", str(out), "--cluster", str(spec), "--profile", str(profile),
                     "--json", str(doc)]) == 0
        text = capsys.readouterr().out
        assert "fullgraph --staleness 0" in text and "fullgraph --staleness 1" in text and "recommended: --strategy fullgraph" in text
        epochs[duplex] = {k: v["epoch_s"] for k, v in json.loads(doc.read_text())["simulated"].items()}
    # Both hosts send 100k rows x 64 per exchange: at half duplex the blocking exchanges take twice as long.
    exchange = 4 * 8.0 * 4 * 100_000 * 64 / 100e6
    assert epochs[1.0]["fullgraph --staleness 1"] == pytest.approx(exchange, rel=0.01)
    assert epochs[0.5]["fullgraph --staleness 0"] - epochs[1.0]["fullgraph --staleness 0"] == pytest.approx(exchange, rel=0.01)
    # Profiled under --compress bf16: the halo travels in 2 bytes a value, half the stale step's exchange.
    doc = json.loads(profile.read_text())
    profile.write_text(json.dumps({**doc, "key": {"compress": "bf16"}}))
    assert main(["--partitions", str(out), "--cluster", str(spec), "--profile", str(profile),
                 "--json", str(tmp_path / "bf16.json")]) == 0
    assert "bytes as --compress bf16, as profiled" in capsys.readouterr().out
    bf16 = json.loads((tmp_path / "bf16.json").read_text())["simulated"]["fullgraph --staleness 1"]["epoch_s"]
    assert bf16 == pytest.approx(exchange / 2, rel=0.01)
    bad = tmp_path / "bad.yaml"
    bad.write_text("duplex: 1.5\nhosts:\n  - {name: h0, workers: [{device: cpu}]}\n")
    assert main(["--partitions", str(out), "--cluster", str(bad)]) == 2
    assert "duplex: expected a number in (0, 1]" in capsys.readouterr().err
