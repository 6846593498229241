"""The placement simulator against measured runs: fitted from one profile, checked on layouts it never saw.

One run on this machine (1 host x 2 workers, ``--placement profiled``) writes ``profile.json``;
``placement.simulator`` then predicts, from that profile alone, the epoch time of separate
validation runs (``--placement equal``, the same workload). Each round of ``--repeats`` profiles
again first and its runs are predicted from its own profile (this shared machine's speed drifts
within minutes); a row's ratio is the median of its rounds' predicted / measured:

- 1 host x 2 workers, with and without a slow worker (``GRAPHDIST_TEST_SLOWDOWN=1:F``);
- 2 emulated hosts x 1 worker at each ``--rates`` link rate, with and without the slow worker.

``--strategy fullgraph``: the profile run is ``--strategy fullgraph --placement profiled`` (GCN
3 x ``--hidden``, the full graph as one step), the validation runs are full-graph epochs with
``--staleness 0`` and ``1`` on the same layouts (no slow worker: full-graph training has no
batch share to move), predicted by ``placement.simulator.simulate_fullgraph``.

Before the full-graph runs at each rate, a link probe times one halo exchange's payload (the
profile's boundary rows x width, float32) between the two emulated hosts, one way and both ways
at once (one exchange at a time, as staleness 0 sends them, and four in flight back to back, as
staleness 1 does): the one-way time gives the link rate the simulator is told, the ratios the
``duplex`` share of each regime (``placement.simulator.Layout``): measured, not assumed. Full-graph runs are measured
by their period (epoch start to epoch start, ``period_s``): with staleness the exchanges outlive
the epoch, so its ``epoch_time_s`` alone would undercount.

Emulated hosts are network namespaces on this machine's cores: the simulator is told so (one
machine, ``os.cpu_count()`` cores) and the link rate. Measured: the median epoch time of epochs
2.. of each run (epoch 1 warms caches), then the median over ``--repeats`` rounds that run every
case once each. The table prints measured, predicted, their ratio and
what the simulator says bounds the step; the JSON keeps the profile and every epoch.

Run book (the emulated hosts need root and iproute2; without them only the 1-host rows run):

    sudo .venv/bin/python bench/bench_simulator.py                        # synthetic-100k, 3 rates
    sudo .venv/bin/python bench/bench_simulator.py --rates 100mbit --epochs 2 --dataset synthetic-3000
    sudo .venv/bin/python bench/bench_simulator.py --strategy fullgraph --rates 1gbit,300mbit,100mbit
    # writes bench/results/simulator.json
    sudo .venv/bin/python bench/bench_simulator.py --repeats 1 --fixture FILE
    # also saves the run as a test fixture (tests/placement/fixtures/simulator-synthetic-100k.json):
    # the profile, every row with the simulator's inputs (shares, steps, cores, link rate, probed
    # link figures), the date, commit, machine, load and command; on a quiet machine.
    # tests/placement/test_simulator_fixture.py predicts every row from it, no processes, no root
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))

TRAIN = ["-m", "graphdist.cli.train"]
# Emulated hosts are separate machines: each gets its own core (--shared-cores: both share all of them,
# as before 2026-12-05, when the two unbound processes thrashed each other's caches).
HOST_CORES = [[0], [1]]
TARGET = 0.15  # issue 12: every prediction within 15% of measured


def train_args(a: argparse.Namespace, parts: Path, placement: str, epochs: int) -> list[str]:
    return ["--partitions", str(parts), "--epochs", str(epochs), "--eval-every", "0", "--placement", placement,
            "--prefetch", "--seed", "0", "--log-interval", "100000", "--batch-size", str(a.batch_size),
            "--timeout", "120"]


def fullgraph_args(a: argparse.Namespace, parts: Path, placement: str, epochs: int, staleness: int) -> list[str]:
    return ["--partitions", str(parts), "--strategy", "fullgraph", "--model", "gcn", "--hidden", str(a.hidden),
            "--layers", "3", "--epochs", str(epochs), "--eval-every", "0",
            "--checkpoint-every", "1000", "--placement", placement, "--staleness", str(staleness), "--seed", "0",
            "--log-interval", "100000", "--timeout", "300"]


def run_local(args: list[str], run_dir: Path, slowdown: str, timeout: float) -> list[dict[str, Any]]:
    """graphdist-train on this host with 2 workers; its metrics records."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRAPHDIST_TEST_SLOWDOWN": slowdown}
    done = subprocess.run([sys.executable, *TRAIN, *args, "--num-workers", "2", "--run-dir", str(run_dir)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"local run failed:\n{done.stderr[-3000:]}")
    return _records(run_dir)


def run_emulated(args: list[str], run_dir: Path, slowdown: str, rate: str, timeout: float,
                 pinned: bool) -> list[dict[str, Any]]:
    """graphdist-train under torchrun on 2 emulated hosts x 1 worker joined at ``rate`` (``pinned``: each its own core)."""
    from graphdist.testing.netns import EmulatedCluster
    from graphdist.testing.netns.torchrun import TorchrunJob

    with EmulatedCluster(hosts=2, rate=rate, host_cores=HOST_CORES if pinned else None) as c:
        job = TorchrunJob(c, 1, [*TRAIN, *args, "--run-dir", str(run_dir)], cwd=str(REPO),
                          env={"OMP_NUM_THREADS": "1", "GRAPHDIST_TEST_SLOWDOWN": slowdown})
        codes = job.wait(timeout)
        if codes != [0, 0]:
            raise RuntimeError(f"emulated run at {rate} exited {codes}:\n{job.output()[-3000:]}")
    return _records(run_dir)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def measured_epoch_s(records: list[dict[str, Any]]) -> float:
    if "period_s" in records[-1]:  # fullgraph: start to start, from epoch 3 (2's period holds 1's set-up)
        later = [r["period_s"] for r in records if r["epoch"] > 2] or [records[-1]["period_s"]]
        return statistics.median(later)
    later = [r["epoch_time_s"] for r in records if r["epoch"] > 1] or [records[-1]["epoch_time_s"]]
    return statistics.median(later)


LINK_MODES = ("one", "both", "stream")


def link_worker(rows: int, width: int, mode: str, repeats: int) -> None:
    """In an emulated host (RANK, MASTER_ADDR/PORT set): all-to-alls of ``rows x width`` float32, rank 0
    prints the median seconds per exchange. ``one``: rank 0 to rank 1, 20 ms apart (``burst``: 200 ms
    apart, the link's token bucket full); ``both``: both ways at once, 20 ms apart (one exchange at
    a time, as staleness 0 sends them); ``stream``: both ways, each issued as the one before the last
    lands (as staleness 1 keeps its exchanges queued on the halo group, the link never idle)."""
    from graphdist import comm

    rank = int(os.environ["RANK"])
    comm.init_process_group(rank, 2, f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", timeout_s=60)
    import torch

    x, none = torch.randn(rows, width), torch.zeros(0, width)
    one_way = mode in ("one", "burst")
    send = [none, x] if rank == 0 else [none if one_way else x, none]
    recv = ([0, 0 if one_way else rows] if rank == 0 else [rows, 0])
    times = []
    if mode == "stream":
        # Each exchange issued as the one before the last lands: two in flight, the link never idle.
        pending, stamps = [], []
        for _ in range(4 * repeats):
            pending.append(comm.all_to_all_v_async(send, tag="probe", recv_rows=recv))
            if len(pending) == 2:
                pending.pop(0).wait()
                stamps.append(time.perf_counter())
        pending[0].wait()
        stamps.append(time.perf_counter())
        times = [b - a for a, b in zip(stamps, stamps[1:])]
    else:
        for _ in range(repeats):
            time.sleep(0.2 if mode == "burst" else 0.02)
            t0 = time.perf_counter()
            comm.all_to_all_v_async(send, tag="probe", recv_rows=recv).wait()
            times.append(time.perf_counter() - t0)
    comm.barrier()
    if rank == 0:
        print(json.dumps({"median_s": statistics.median(times[2:])}), flush=True)
    comm.shutdown()


def probe_link(rate: str, rows: int, width: int, port: int, repeats: int = 12) -> dict[str, float]:
    """At ``rate``, a ``rows x width`` payload's measured one-way rate (bits/s) and the share each direction
    keeps when both carry it: one exchange at a time (``duplex``) and back to back (``duplex_stream``)."""
    from graphdist.testing.netns import EmulatedCluster

    with EmulatedCluster(hosts=2, rate=rate) as c:
        medians = {mode: _link_median(c, rate, rows, width, mode, repeats, port + k)
                   for k, mode in enumerate(LINK_MODES)}
    bits = 8.0 * 4 * rows * width
    return {"one_way_s": medians["one"], "both_ways_s": medians["both"], "stream_s": medians["stream"],
            "link_bps": bits / medians["one"], "duplex": min(1.0, medians["one"] / medians["both"]),
            "duplex_stream": min(1.0, medians["one"] / medians["stream"])}


def _link_median(c: Any, rate: str, rows: int, width: int, mode: str, repeats: int, port: int) -> float:
    """One ``link_worker`` per emulated host of ``c`` in ``mode``: rank 0's median seconds per exchange."""
    procs = []
    for h in range(2):
        env = {"RANK": str(h), "MASTER_ADDR": c.addr(0), "MASTER_PORT": str(port),
               "GLOO_SOCKET_IFNAME": c.iface(h), "OMP_NUM_THREADS": "1"}
        argv = [sys.executable, str(Path(__file__).resolve()), "--link-worker", str(rows), str(width), mode,
                str(repeats)]
        procs.append(c.run(h, argv, env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    lines = [line for line in outs[0].splitlines() if line.startswith("{")]
    if not lines or any(p.returncode for p in procs):
        raise RuntimeError(f"link probe ({mode}) at {rate} failed:\n{outs[0][-2000:]}\n{outs[1][-2000:]}")
    return float(json.loads(lines[-1])["median_s"])


def probe_burst(rate: str, nbytes: int, port: int, repeats: int = 8) -> float:
    """Bytes the link at ``rate`` passes at once after idling: a one-way ``nbytes`` transfer 200 ms after
    the last, less what the rate carries in the time it took (``Layout.burst_bytes``)."""
    from graphdist.testing.netns import EmulatedCluster
    from placement.cluster import parse_rate

    rows = max(1, nbytes // (4 * 128))
    with EmulatedCluster(hosts=2, rate=rate) as c:
        seconds = _link_median(c, rate, rows, 128, "burst", repeats, port)
    return max(0.0, rows * 128 * 4 - seconds * parse_rate(rate) / 8.0)


def two_hosts(link_bps: float, pinned: bool, **kw: Any) -> Any:
    """The simulator's layout of 2 emulated hosts x 1 worker: each on its own core (``pinned``), or both
    sharing this machine's cores."""
    from placement.simulator import Layout

    if pinned:
        return Layout.hosts_of([1, 1], link_bps, cores=1, **kw)
    return Layout.hosts_of([1, 1], link_bps, cores=os.cpu_count() or 1, shared_machine=True, **kw)


def predict(profile: dict[str, Any], records: list[dict[str, Any]], rate_bps: Optional[float],
            factor: float, burst_bytes: float = 0.0, pinned: bool = True) -> Any:
    """The simulator's epoch for one validation run's layout, shares and steps."""
    from placement.profiled import costs_from_profile
    from placement.simulator import Layout, simulate

    workers, shape = costs_from_profile(profile)
    cores = os.cpu_count() or 1
    layout = (Layout.one_host(2, cores=cores) if rate_bps is None
              else two_hosts(rate_bps, pinned, burst_bytes=burst_bytes))
    shares = [int(s) for s in records[-1]["batch_share"]]
    return simulate(workers, shares, layout, steps=int(records[-1]["steps"]), model=shape, overlap=True,
                    sacp=True, prefetch=True, slowdown=[1.0, factor], profiled_layout=Layout.one_host(2, cores=cores))


def predict_fullgraph(profile: dict[str, Any], link: Optional[dict[str, float]], staleness: int,
                      pinned: bool = True) -> Any:
    """The simulator's full-graph epoch on one validation run's layout (``link``: the probe's figures)."""
    from placement.profiled import fullgraph_costs_from_profile
    from placement.simulator import Layout, simulate_fullgraph

    workers, shape = fullgraph_costs_from_profile(profile)
    cores = os.cpu_count() or 1
    layout = (Layout.one_host(2, cores=cores) if link is None
              else two_hosts(link["link_bps"], pinned, duplex=link["duplex"], duplex_stream=link["duplex_stream"]))
    return simulate_fullgraph(workers, layout, model=shape, staleness=staleness, overlap=True,
                              profiled_layout=Layout.one_host(2, cores=cores))


def bench(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from bench.bench_cluster import ensure_partitions
    from graphdist.testing.netns import unavailable_reason
    from placement.cluster import parse_rate

    parts = ensure_partitions(a.dataset, tmp / "cache")
    full = a.strategy == "fullgraph"

    def profiled(rep: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        run_local(fullgraph_args(a, parts, "profiled", 1, 0) if full else train_args(a, parts, "profiled", 1),
                  tmp / f"profile-{rep}", "", a.timeout)
        print(f"profile {rep + 1}: {time.perf_counter() - t0:.1f} s for the profiling run", flush=True)
        return json.loads((tmp / f"profile-{rep}" / "profile.json").read_text())

    # One profile per round, taken just before that round's runs: this shared machine's speed drifts
    # by a quarter within minutes (2026-12-06: the same 1 host x 2 run took 1.46, 1.77 and 2.20 s/epoch
    # in three rounds), and a prediction is judged against runs made under the load it was measured in.
    profiles = [profiled(0)]
    profile = profiles[0]
    slow = f"1:{a.slowdown:g}"
    layouts: list[tuple[str, Optional[str]]] = [("1 host x 2", None)]
    rates = [r for r in a.rates.split(",") if r]
    reason = unavailable_reason() if rates else None
    if reason:
        print(f"emulated hosts skipped: {reason}", flush=True)
    else:
        layouts += [(f"2 hosts x 1 @ {r}", r) for r in rates]
    # A case's last field: the slow worker's factor (minibatch), or the staleness (fullgraph).
    cases = [(name, rate, v) for name, rate in layouts for v in ((0, 1) if full else sorted({1.0, a.slowdown}))]
    links: dict[str, dict[str, float]] = {}
    bursts: dict[str, float] = {}
    if not full:  # a step's gradients are small: what a link passes at once after compute matters
        for i, rate in enumerate(r for _, r in layouts if r):
            bursts[rate] = probe_burst(rate, int(profile["measures"][0]["param_bytes"]), 29600 + i)
            print(f"link {rate}: {bursts[rate] / 1024:.0f} KiB pass at once after idling", flush=True)
    if full:
        m = profile["fullgraph"][0]
        for i, rate in enumerate(r for _, r in layouts if r):
            links[rate] = probe_link(rate, max(m["send_rows"]), m["widths"][0], 29500 + 10 * i)
            print(f"link {rate}: one way {1e3 * links[rate]['one_way_s']:.1f} ms ({links[rate]['link_bps'] / 1e6:.0f} "
                  f"Mbit/s), both ways {1e3 * links[rate]['both_ways_s']:.1f} ms (duplex {links[rate]['duplex']:.2f}), back to "
                  f"back {1e3 * links[rate]['stream_s']:.1f} ms (duplex {links[rate]['duplex_stream']:.2f})",
                  flush=True)
    measured: dict[int, list[float]] = {k: [] for k in range(len(cases))}
    last: dict[int, list[dict[str, Any]]] = {}
    predicted: dict[int, list[Any]] = {k: [] for k in range(len(cases))}
    for rep in range(a.repeats):  # every case once per round: drifts of this shared machine hit all alike
        if rep:
            profiles.append(profiled(rep))
        for k, (name, rate, v) in enumerate(cases):
            run_dir = tmp / f"run-{rep}-{k}"
            args = fullgraph_args(a, parts, "equal", a.epochs, int(v)) if full else train_args(a, parts, "equal",
                                                                                              a.epochs)
            spec = slow if not full and v > 1 else ""
            records = (run_local(args, run_dir, spec, a.timeout) if rate is None
                       else run_emulated(args, run_dir, spec, rate, a.timeout, a.pinned))
            measured[k].append(measured_epoch_s(records))
            last[k] = records
            bps = parse_rate(rate) if rate else None
            predicted[k].append(predict_fullgraph(profiles[rep], links.get(rate), int(v), a.pinned) if full
                                else predict(profiles[rep], records, bps, v, bursts.get(rate, 0.0), a.pinned))
            what = f"s={v}" if full else f"slow x{v:g}"
            print(f"  round {rep + 1} {name:<22} {what}: {measured[k][-1]:.2f} s/epoch", flush=True)
    rows = []
    for k, (name, rate, v) in enumerate(cases):
        bps = parse_rate(rate) if rate else None
        preds = predicted[k]
        pred = preds[-1]  # the last round's, for the bound and the parts
        meas = statistics.median(measured[k])
        halo = statistics.median(r.get("halo_wait_s", 0.0) for r in last[k] if r["epoch"] > 2) if full else None
        # Each round's run against the prediction from that round's profile; the row's ratio is their median.
        ratio = statistics.median(p.epoch_s / m for p, m in zip(preds, measured[k]))
        rows.append({"layout": name, "rate": rate, ("staleness" if full else "slowdown"): v, "measured_s": meas,
                     "runs_s": measured[k], "predicted_s": statistics.median(p.epoch_s for p in preds),
                     "predicted_runs_s": [p.epoch_s for p in preds], "ratio": ratio,
                     "bottleneck": pred.bottleneck, "steps": pred.steps, "predicted_step_s": pred.step_s,
                     "predicted_sync_s": pred.sync_s, "measured_halo_wait_s": halo,
                     "predicted_halo_s": pred.parts.get("halo_s"),
                     "inputs": _row_inputs(a, last[k], rate, bps, v, links, bursts)})
    return {"dataset": a.dataset, "strategy": a.strategy, "hidden": a.hidden, "batch_size": a.batch_size, "epochs": a.epochs,
            "repeats": a.repeats, "hosts_pinned": a.pinned, "profile": profile, "profiles": profiles, "links": links,
            "bursts": bursts, "rows": rows}


def _row_inputs(a: argparse.Namespace, records: list[dict[str, Any]], rate: Optional[str], bps: Optional[float],
                v: float, links: dict[str, dict[str, float]], bursts: dict[str, float]) -> dict[str, Any]:
    """What ``predict`` / ``predict_fullgraph`` told the simulator for one row, beyond the profile:
    enough to predict it again elsewhere (``--fixture``)."""
    inputs: dict[str, Any] = {"cores": os.cpu_count() or 1, "pinned": a.pinned, "rate_bps": bps}
    if a.strategy == "fullgraph":
        inputs.update(staleness=int(v), link=links.get(rate) if rate else None)
    else:
        inputs.update(shares=[int(s) for s in records[-1]["batch_share"]], steps=int(records[-1]["steps"]),
                      slowdown=[1.0, float(v)], burst_bytes=bursts.get(rate, 0.0) if rate else 0.0)
    return inputs


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return done.stdout.rstrip("\n") if done.returncode == 0 else ""


def _tree() -> dict[str, Any]:
    """The code a run ran (the commit, the tracked files changed from it and a hash of those changes)
    and the machine's load."""
    return {"commit": _git("rev-parse", "HEAD"),
            "uncommitted": _git("status", "--porcelain", "--untracked-files=no").splitlines(),
            "uncommitted_sha256": hashlib.sha256(_git("diff", "HEAD").encode()).hexdigest(),
            "loadavg": Path("/proc/loadavg").read_text().split()[:3]}


def fixture(res: dict[str, Any], command: str, tree: dict[str, Any]) -> dict[str, Any]:
    """The run as a test fixture: when, where (commit, machine) and how it was taken, the profile it
    measured, and per row its layout, measured epoch and the simulator's inputs
    (``tests/placement/test_simulator_fixture.py``). ``tree``: :func:`_tree` when the run began (the
    load then, ``loadavg_at_end`` by its end); if the code changed meanwhile, ``tree_at_end`` says how."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    keep = ("layout", "rate", "slowdown", "staleness", "measured_s", "runs_s", "predicted_s", "predicted_runs_s",
            "ratio", "bottleneck", "inputs")
    end = _tree()
    changed = {k: end[k] for k in ("commit", "uncommitted", "uncommitted_sha256") if end[k] != tree[k]}
    return {"recorded": res["started"], **tree, "loadavg_at_end": end["loadavg"],
            **({"tree_at_end": changed} if changed else {}),
            "machine": {"model_name": model, "nproc": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
                        "python": platform.python_version()},
            "command": command,
            "run": {k: res[k] for k in ("dataset", "strategy", "hidden", "batch_size", "epochs", "repeats",
                                        "hosts_pinned")},
            "profile": res["profile"], "profiles": res["profiles"], "links": res["links"], "bursts": res["bursts"],
            "rows": [{k: r[k] for k in keep if k in r} for r in res["rows"]]}


def print_table(res: dict[str, Any]) -> None:
    full = res.get("strategy") == "fullgraph"
    what = f"fullgraph GCN 3x{res.get('hidden')}" if full else f"batch {res['batch_size']}"
    print(f"\nSimulator vs measured, {res['dataset']} ({what}; a profile of 1 host x 2 workers before each round; "
          f"pred/meas: the median of the rounds'):")
    print(f"{'layout':<24} {'s' if full else 'slow':>5} {'measured s':>11} {'predicted s':>12} {'pred/meas':>10}  bound")
    for r in res["rows"]:
        mark = "" if abs(r["ratio"] - 1) <= TARGET else "  (outside 15%)"
        case = f"{r['staleness']:>5}" if full else f"{r['slowdown']:>4g}x"
        halo = (f"; halo wait {r['measured_halo_wait_s']:.2f} s, exchange predicted {r['predicted_halo_s']:.2f} s"
                if full else "")
        print(f"{r['layout']:<24} {case} {r['measured_s']:>11.2f} {r['predicted_s']:>12.2f} "
              f"{r['ratio']:>9.2f}x  {r['bottleneck']}{halo}{mark}")
    worst = max(abs(r["ratio"] - 1) for r in res["rows"])
    print(f"worst error {100 * worst:.0f}% (target <= {100 * TARGET:.0f}%)")


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--link-worker"]:
        link_worker(int(argv[1]), int(argv[2]), argv[3], int(argv[4]))
        from graphdist.launch import fast_exit

        fast_exit(0)  # gloo's threads must not meet the interpreter's teardown
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="synthetic-100k")
    p.add_argument("--rates", default="1gbit,100mbit,20mbit", help="emulated host link rates ('': 1 host only)")
    p.add_argument("--slowdown", type=float, default=2.0, help="rank 1's factor in the slow-worker runs (1: none)")
    p.add_argument("--epochs", type=int, default=None,
                   help="epochs per validation run (default 3, measured 2..; fullgraph 8, periods of 3..)")
    p.add_argument("--repeats", type=int, default=2, help="rounds of every validation run (median)")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--strategy", choices=("minibatch", "fullgraph"), default="minibatch")
    p.add_argument("--hidden", type=int, default=128, help="--strategy fullgraph: the GCN's width")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--out", default=None, help="default bench/results/simulator.json (fullgraph: simulator-fullgraph.json)")
    p.add_argument("--fixture", default=None,
                   help="also save the run (profile, every row and its simulator inputs, date, commit, machine, "
                        "command) as this JSON test fixture")
    p.add_argument("--shared-cores", action="store_true",
                   help="emulated hosts share every core (default: each host its own core, as separate machines)")
    a = p.parse_args(argv)
    tree = _tree() if a.fixture else {}
    a.pinned = not a.shared_cores and len(os.sched_getaffinity(0)) >= 2
    a.epochs = a.epochs or (8 if a.strategy == "fullgraph" else 3)
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        os.environ.setdefault("GRAPHDIST_CACHE", str(Path(tmp) / "cache"))
        res = bench(a, Path(tmp))
    print_table(res)
    res["started"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    res["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    out = Path(a.out or RESULTS / ("simulator-fullgraph.json" if a.strategy == "fullgraph" else "simulator.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"wrote {out}")
    if a.fixture:
        python = Path(sys.executable)
        python = python.relative_to(REPO) if python.is_relative_to(REPO) else python
        command = shlex.join([str(python), str(Path(sys.argv[0])), *argv])
        Path(a.fixture).parent.mkdir(parents=True, exist_ok=True)
        Path(a.fixture).write_text(json.dumps(fixture(res, command, tree), indent=1) + "\n")
        print(f"wrote {a.fixture}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
