"""Distributed sampler throughput against the local sampler, and the remote-feature cache hit rate.

Workload: the generated graph (``--nodes``, default 1,000,000, ~20M edges) partitioned with
METIS into 2 parts; batches of 1024 seeds from each worker's own nodes, fan-outs 15,10,5
(seeds outward), without replacement, one thread per worker.

- local: ``NeighborSampler`` on the whole graph in one process (the per-worker baseline), alone
  (in the main process) and as 2 processes at once (both cores busy, as the 2 distributed workers
  have them): each distributed worker also holds the whole graph and samples the same seed
  batches with the local sampler, so "2 local" and "distributed" run in the same two processes;
- distributed: 2 workers on localhost (gloo), each ``NeighborSampler(DistNeighborSource(part))``
  on its partition, driven two ways: ``sample`` one batch at a time, and ``sample_stream`` (what
  ``NodeLoader`` calls), which keeps 6 batches in flight (two streams of 3 that share each hop's
  exchanges; ``--pipeline``) so one stream samples while the other's exchanges travel. Per worker:
  sampled edges/s, the share of frontier nodes owned by the other worker, and the time spent
  waiting in the all-to-alls; and the pipelined pass's exchanges alone, recorded and replayed one after
  another with the same sizes between the same two processes: their CPU against a local pass is
  the share the transport (gloo over TCP, its threads on the worker's own core) takes before any
  sampling work, so ``1 / (1 + share)`` bounds what the distributed sampler can reach here.
- timing: after one untimed pass of each, the three passes (2 local at once, distributed one at a
  time, distributed pipelined) alternate ``--passes`` times per round (order reversed every other
  time; both workers start each pass together), over ``--rounds`` rounds. This machine's speed
  drifts by 20-40% within seconds, so "vs 2 local" is the median over all alternations of a pass's
  rate divided by the mean rate of the 2 local passes right beside it (paired), and the rates are
  medians of all passes;
- features: each worker gathers its batches' input features through ``DistFeatureSource`` with
  the cache off, at 10% of the halo, and holding the whole halo: hit rate and rows fetched;
- cache policies at ``--cache-sizes`` (shares of the halo): the halo nodes most referenced by the
  part's edges (``degree``, the first policy), the remote nodes by inclusion probability
  (``inclusion``, SALIENT++'s VIP, ``sampling/inclusion.py``: 1-hop and 2-hop alike) and an
  ``oracle`` of equal size, the remote nodes read most often by ``--oracle-batches`` other
  batches; all scored on the same fresh batches. Target (issue 15): inclusion >= 90% of the
  oracle's hit rate and >= 1.3x degree's at 10% of the halo. A PNG of hit rate against size.

Targets: distributed per-worker edges/s >= 50% of the local sampler's (issue 4); pipelined >= 0.95x
of two local samplers at once (issue 47).

Run book:
    OMP_NUM_THREADS=1 python bench/bench_dist_sampler.py                # ~5 min (3 rounds)
    OMP_NUM_THREADS=1 python bench/bench_dist_sampler.py --nodes 200000 # quick
Writes bench/results/dist_sampler.json (git-ignored).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FANOUTS = [15, 10, 5]
MODES = ("local", "single", "stream")  # 2 local samplers at once; distributed one batch at a time; pipelined


def partitions(nodes: int) -> Path:
    """The 2-part METIS partition of synthetic-<nodes>, made once into the cache."""
    from partition.api import PartitionConfig, default_output, partition

    out = default_output(f"synthetic-{nodes}", PartitionConfig(2, "metis", 0))
    if not (out / "meta.json").exists():
        partition(f"synthetic-{nodes}", 2, method="metis", out=out, seed=0, force=True)
    return out


def local_rate(nodes: int, batches: int, batch_size: int, passes: int) -> dict[str, float]:
    """The local sampler alone (this process): the median of ``passes`` timed passes after an untimed one."""
    from graphdist.data import load_graph
    from sampling import NeighborSampler

    graph = load_graph(f"synthetic-{nodes}")
    sampler = NeighborSampler(graph, FANOUTS, seed=0)
    order = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(1))
    seeds = [order[i * batch_size : (i + 1) * batch_size] for i in range(batches)]
    rows = [_timed_pass((sampler.sample(s) for s in seeds), batches * batch_size) for _ in range(1 + passes)]
    return _median_rows(rows[1:])


def _timed_pass(stream: Any, num_seeds: int) -> dict[str, float]:
    """Draws every batch of ``stream``: edges/s and seeds/s."""
    edges, start = 0, time.perf_counter()
    for batch in stream:
        edges += batch.num_sampled_edges
    elapsed = time.perf_counter() - start
    return {"edges_per_s": edges / elapsed, "seeds_per_s": num_seeds / elapsed}


def bind(rank: int, world_size: int, on: bool) -> None:
    """Each worker on its own core, as ``graphdist-train`` binds its workers by default (``--bind-cores``)."""
    from graphdist.config import TrainConfig
    from graphdist.trainers.run import bind_worker

    if on:
        bind_worker(rank, world_size, TrainConfig(num_workers=world_size))


@contextlib.contextmanager
def _recorded_exchanges() -> Iterator[list[tuple[Any, ...]]]:
    """Records the sizes of every all-to-all the distributed sampler starts (``graphdist.comm``'s two calls)."""
    from graphdist import comm

    log: list[tuple[Any, ...]] = []
    counts_async, v_async = comm.all_to_all_counts_async, comm.all_to_all_v_async

    def counts(send_rows: Any, *args: Any, **kwargs: Any) -> Any:
        log.append(("counts", [int(r) for r in send_rows]))
        return counts_async(send_rows, *args, **kwargs)

    def rows(inputs: Any, *args: Any, recv_rows: Any = None, **kwargs: Any) -> Any:
        log.append(("rows", [int(t.shape[0]) for t in inputs], tuple(inputs[0].shape[1:]), inputs[0].dtype,
                    None if recv_rows is None else [int(r) for r in recv_rows]))
        return v_async(inputs, *args, recv_rows=recv_rows, **kwargs)

    comm.all_to_all_counts_async, comm.all_to_all_v_async = counts, rows
    try:
        yield log
    finally:
        comm.all_to_all_counts_async, comm.all_to_all_v_async = counts_async, v_async


def _replay(log: list[tuple[Any, ...]]) -> Any:
    """A timed pass of the recorded exchanges alone, one after another, with payloads made beforehand: what
    the transport costs this process (its CPU: the launches, gloo's threads and the socket copies)."""
    from graphdist import comm

    payloads = [None if kind == "counts" else [torch.zeros((r, *rest[0]), dtype=rest[1]) for r in send]
                for kind, send, *rest in log]

    def run() -> dict[str, float]:
        cpu, start = time.process_time(), time.perf_counter()
        for (kind, send, *rest), payload in zip(log, payloads):
            if payload is None:
                comm.all_to_all_counts_async(send, tag="sample").wait()
            else:
                comm.all_to_all_v_async(payload, tag="sample", recv_rows=rest[2]).wait()
        return {"wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu, "exchanges": len(log),
                "bytes": sum(sum(p.numel() * p.element_size() for p in payload) for payload in payloads if payload)}
    return run


def _cache_policies(part: Any, sampler: Any, order: torch.Tensor, fresh: list[torch.Tensor], batch_size: int,
                    sizes: list[float], oracle_batches: int) -> dict[str, list[dict[str, float]]]:
    """Hit rate on the ``fresh`` batches' inputs of a cache chosen by degree, by inclusion probability and by
    an oracle that counted the inputs of ``oracle_batches`` other batches (collective)."""
    from sampling.distributed import DistFeatureSource
    from sampling.inclusion import inclusion_probability

    start = time.perf_counter()
    inclusion = inclusion_probability(part, order, batch_size, FANOUTS)
    inclusion_s = time.perf_counter() - start
    def read_counts(batches: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(nodes read, how many of ``batches`` read each): a cache ranked by what it counted."""
        counts = torch.zeros(int(part.part_offsets[-1]))  # every node of the graph
        for nodes in batches:
            counts[nodes] += 1
        seen = counts.nonzero().view(-1)
        return seen, counts[seen].double()

    gen = torch.Generator().manual_seed(1000 + part.part_id)
    # other batches: another shuffle of the same seeds
    oracle = read_counts(sampler.sample(order[torch.randperm(order.numel(), generator=gen)[:batch_size]]).input_nodes
                         for _ in range(oracle_batches))
    # The ceiling: counted on the scored batches themselves (no cache of that size can hit more of them).
    ceiling = read_counts(fresh)
    num_halo = part.num_local - part.num_inner
    remote = int((part.inner_local(inclusion[0]) < 0).sum())
    out: dict[str, list[dict[str, float]]] = {"degree": [], "inclusion": [], "oracle": [], "ceiling": []}
    for share in sizes:
        rows = max(1, int(share * num_halo))
        for policy, known in (("degree", None), ("inclusion", inclusion), ("oracle", oracle), ("ceiling", ceiling)):
            features = DistFeatureSource(part, cache_rows=rows, inclusion=known)
            for nodes in fresh:
                features.gather(nodes)
            out[policy].append({"share": share, "rows": int(features.cache_ids.numel()),
                                "hit_rate": features.stats.hit_rate})
    out["inclusion_s"] = inclusion_s  # type: ignore[assignment]
    out["remote_nodes"] = remote  # type: ignore[assignment]  # remote nodes a batch may read (1- and 2-hop)
    return out


def _worker(rank: int, world_size: int, part_dir: str, nodes: int, batches: int, batch_size: int, out_dir: str,
            cache_sizes: list[float], oracle_batches: int, pipeline: int, passes: int, round_id: int,
            features: bool, bound: bool) -> None:
    from graphdist import comm
    from graphdist.data import load_graph
    from partition.api import load_partition
    from sampling import NeighborSampler
    from sampling.distributed import DistFeatureSource, DistNeighborSource

    bind(rank, world_size, bound)
    torch.set_num_threads(1)
    part = load_partition(part_dir, rank, verify=False)
    source = DistNeighborSource(part, seed=0)
    sampler = NeighborSampler(source, FANOUTS, seed=rank, pipeline=pipeline)
    local = NeighborSampler(load_graph(f"synthetic-{nodes}"), FANOUTS, seed=rank)  # the same batches, whole graph
    [(lo, hi)] = part.inner_ranges
    order = lo + torch.randperm(hi - lo, generator=torch.Generator().manual_seed(rank))
    seeds = [order[i * batch_size : (i + 1) * batch_size] for i in range(batches)]
    # The sampler may keep fewer in flight than asked (its mark arrays' memory cap): report what it keeps.
    result: dict[str, Any] = {"rank": rank, "halo_nodes": part.num_local - part.num_inner,
                              "pipeline": sampler.pipeline, "passes": []}
    inputs: list[torch.Tensor] = []

    def timed(mode: str) -> dict[str, float]:
        nonlocal inputs
        source.local_requests = source.remote_requests = 0
        comm.barrier()  # both workers start together, whichever pass it is
        comm.reset_byte_counts()
        if mode == "local":
            return _timed_pass((local.sample(s) for s in seeds), batches * batch_size)
        stream = (sampler.sample(s) for s in seeds) if mode == "single" else sampler.sample_stream(seeds)
        inputs = []

        def keeping_inputs() -> Iterator[Any]:  # the last pass's input nodes feed the feature measurements
            for batch in stream:
                inputs.append(batch.input_nodes)
                yield batch

        row = _timed_pass(keeping_inputs(), batches * batch_size)
        elapsed = batches * batch_size / row["seeds_per_s"]
        return {**row, "comm_share": comm.time_counts().get("sample", 0.0) / elapsed,
                "remote_frontier_share": source.remote_requests / max(1, source.remote_requests
                                                                      + source.local_requests)}

    for mode in ("local", "single"):  # untimed: the first pass of each faults its memory in (the pipelined one below)
        timed(mode)
    with _recorded_exchanges() as exchanges:  # the pipelined pass's exchanges, replayed below
        timed("stream")
    replay = _replay(exchanges)
    for k in range(passes):  # alternating, the order reversed every other time
        row = {mode: timed(mode) for mode in (MODES if k % 2 == 0 else MODES[::-1])}
        comm.barrier()
        row["exchanges"] = replay()
        result["passes"].append(row)
    if not features:  # the features and cache policies are measured once, in the last round
        Path(out_dir, f"rank{rank}_{round_id}.json").write_text(json.dumps(result))
        return
    num_halo = part.num_local - part.num_inner
    result["policies"] = _cache_policies(part, sampler, order, inputs, batch_size, cache_sizes, oracle_batches)
    for label, rows in (("off", 0), ("10%", num_halo // 10), ("all", -1)):  # -1: every halo node
        features = DistFeatureSource(part, cache_rows=rows)
        start = time.perf_counter()
        for nodes in inputs:
            features.gather(nodes)
        result[f"cache_{label}"] = {"rows": int(features.cache_ids.numel()), "hit_rate": features.stats.hit_rate,
                                    "fetched_rows": features.stats.fetched_rows,
                                    "remote_rows": features.stats.remote_rows,
                                    "gather_s": time.perf_counter() - start}
    Path(out_dir, f"rank{rank}_{round_id}.json").write_text(json.dumps(result))


def _median_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each key's median over the rounds' rows."""
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


def print_policies(policies: dict[str, Any], halo: int) -> None:
    print(f"\ncache policies (rank 0, {halo:,} halo nodes, {policies['remote_nodes']:,} remote nodes a batch may "
          f"read; inclusion probabilities computed in {policies['inclusion_s']:.1f} s), hit rate on fresh batches "
          f"at a cache of:")
    print(f"{'share of halo':>14}{'rows':>10}{'degree':>9}{'inclusion':>11}{'oracle':>9}{'ceiling':>9}"
          f"{'incl/oracle':>13}{'incl/degree':>13}")
    for d, i, o, c in zip(policies["degree"], policies["inclusion"], policies["oracle"], policies["ceiling"]):
        print(f"{100 * d['share']:>13.0f}%{d['rows']:>10,}{100 * d['hit_rate']:>8.1f}%{100 * i['hit_rate']:>10.1f}%"
              f"{100 * o['hit_rate']:>8.1f}%{100 * c['hit_rate']:>8.1f}%{i['hit_rate'] / max(o['hit_rate'], 1e-9):>13.2f}"
              f"{i['hit_rate'] / max(d['hit_rate'], 1e-9):>13.2f}")
    print("  oracle: the remote nodes most read by other batches (the same seeds, reshuffled); ceiling: those most "
          "read by the scored batches themselves")


def plot_policies(ranks: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for policy in ("degree", "inclusion", "oracle", "ceiling"):
        for r in ranks:
            points = r["policies"][policy]
            ax.plot([100 * p["share"] for p in points], [100 * p["hit_rate"] for p in points], marker="o",
                    label=f"{policy}, rank {r['rank']}", linestyle="-" if r["rank"] == 0 else "--")
    ax.set(xscale="log", xlabel="cache size (% of the halo)", ylabel="hit rate on fresh batches (%)",
           title="remote-feature cache: what it holds")
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    # Steady-state throughput: the compiled sampling loops from the first batch (a process would
    # otherwise run its first 256 hops on torch and load numba mid-measurement; graphdist._numba).
    os.environ.setdefault("GRAPHDIST_NUMBA", "eager")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1_000_000)
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--cache-sizes", type=float, nargs="+", default=[0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0],
                   help="cache sizes as shares of the halo (default 1%% to 100%%)")
    p.add_argument("--pipeline", type=int, default=6, help="batches in flight in sample_stream (default 6, "
                   "NeighborSampler's)")
    p.add_argument("--oracle-batches", type=int, default=200, help="batches the oracle counts inputs of")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each with fresh worker processes (default 3)")
    p.add_argument("--passes", type=int, default=4, help="alternations of the 2 local and the 2 distributed "
                   "samplers' passes per round (default 4)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "dist_sampler.json"))
    p.add_argument("--png", default=str(REPO / "bench" / "results" / "cache_policies.png"))
    p.add_argument("--no-bind", dest="bind", action="store_false",
                   help="leave the 2 workers to the scheduler (default: each on its own core, as training runs them)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    from graphdist.testing import launch

    part_dir = partitions(args.nodes)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        # The local sampler alone, then the 2 workers, round after round; inside a round the workers
        # alternate their local and distributed passes (this machine is shared and noisy).
        for i in range(args.rounds):
            local_i = local_rate(args.nodes, args.batches, args.batch_size, args.passes)
            launch(_worker, 2, str(part_dir), args.nodes, args.batches, args.batch_size, tmp, args.cache_sizes,
                   args.oracle_batches, args.pipeline, args.passes, i, i == args.rounds - 1, args.bind, timeout=1800)
            rounds.append({"local": local_i,
                           "ranks": [json.loads(Path(tmp, f"rank{r}_{i}.json").read_text()) for r in range(2)]})
    local = _median_rows([r["local"] for r in rounds])
    passes = [list(zip(*(r["passes"] for r in rd["ranks"]))) for rd in rounds]  # [round][pass][rank][mode]
    every = [each for rd in passes for each in rd]
    local_pair = [_median_rows([each[rank]["local"] for each in every]) for rank in range(2)]
    ranks = [dict(r) for r in rounds[-1]["ranks"]]  # copies: the rounds keep their own figures in the JSON
    for rank, r in enumerate(ranks):
        for mode in ("single", "stream"):
            r[mode] = _median_rows([each[rank][mode] for each in every])
            # Paired: each pass against the mean of the 2 local passes of the same alternation.
            r[mode]["vs_pair"] = statistics.median(
                each[rank][mode]["edges_per_s"] / statistics.mean(x["local"]["edges_per_s"] for x in each)
                for each in every)
    print("rounds (M edges/s, medians: local alone / 2 local at once / distributed pipelined rank 0, 1): " + "; ".join(
        f"{rd['local']['edges_per_s'] / 1e6:.2f} / "
        + " / ".join(", ".join(f"{statistics.median(x[rank][mode]['edges_per_s'] for x in rp) / 1e6:.2f}"
                               for rank in range(2)) for mode in ("local", "stream"))
        for rd, rp in zip(rounds, passes)))
    print(f"\nsynthetic-{args.nodes}, 2 METIS parts, batch {args.batch_size}, fan-outs {FANOUTS}, 1 thread/worker")
    print(f"{'sampler':<36}{'M edges/s':>10}{'seeds/s':>9}{'vs local':>9}{'vs 2 local':>11}{'remote':>8}"
          f"{'in comm':>9}")
    print(f"{'local, alone':<36}{local['edges_per_s'] / 1e6:>10.2f}{local['seeds_per_s']:>9,.0f}{1.0:>9.2f}")
    for i, r in enumerate(local_pair):
        print(f"{'local, 2 processes at once #' + str(i):<36}{r['edges_per_s'] / 1e6:>10.2f}{r['seeds_per_s']:>9,.0f}"
              f"{r['edges_per_s'] / local['edges_per_s']:>9.2f}")
    for mode, label in (("single", "one batch at a time"), ("stream", f"pipelined, {ranks[0]['pipeline']} in flight")):
        for r in ranks:
            m = r[mode]
            print(f"{'dist. rank ' + str(r['rank']) + ', ' + label:<36}{m['edges_per_s'] / 1e6:>10.2f}"
                  f"{m['seeds_per_s']:>9,.0f}{m['edges_per_s'] / local['edges_per_s']:>9.2f}"
                  f"{m['vs_pair']:>11.2f}{100 * m['remote_frontier_share']:>7.0f}%"
                  f"{100 * m['comm_share']:>8.0f}%")
    # The transport's own cost: the pipelined pass's exchanges replayed alone, beside the local passes.
    for rank in range(2):
        share = statistics.median(each[rank]["exchanges"]["cpu_s"] * each[rank]["local"]["seeds_per_s"]
                                  / (args.batches * args.batch_size) for each in every)
        ex = _median_rows([each[rank]["exchanges"] for each in every])
        ranks[rank]["exchanges"] = {**ex, "cpu_share_of_local_pass": share}
        print(f"{'dist. rank ' + str(rank) + ', its exchanges alone':<36}{int(ex['exchanges']):>10} all-to-alls, "
              f"{ex['bytes'] / 2**20:.1f} MiB sent, {ex['wall_s']:.3f} s wall, {ex['cpu_s']:.3f} s CPU = "
              f"{100 * share:.1f}% of a local pass: at most {1 / (1 + share):.2f}x of it with nothing else added")
    print("  vs 2 local: the median, over every alternation, of the pass's rate over the mean of the 2 local passes "
          "beside it")
    print(f"\nremote features (rank 0, {ranks[0]['halo_nodes']:,} halo nodes):")
    for label in ("off", "10%", "all"):
        c = ranks[0][f"cache_{label}"]
        print(f"  cache {label:>4}: {c['rows']:>9,} rows, hit rate {100 * c['hit_rate']:5.1f}%, "
              f"fetched {c['fetched_rows']:>10,} of {c['remote_rows']:,} remote rows, gather {c['gather_s']:.2f} s")
    print_policies(ranks[0]["policies"], ranks[0]["halo_nodes"])
    plot_policies(ranks, Path(args.png))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"nodes": args.nodes, "bound": args.bind, "pipeline": ranks[0]["pipeline"], "local": local, "local_pair": local_pair,
                               "ranks": ranks, "rounds": rounds},
                              indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
