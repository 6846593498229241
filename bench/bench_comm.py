"""Allreduce algorithms alone on the emulated cluster: ring vs halving-doubling vs hierarchical.

Needs root and iproute2 (``graphdist.testing.netns``). Two hosts (network namespaces) with
``--workers-per-host`` workers each (default 2: traffic between a host's workers is loopback,
only inter-host traffic crosses the shaped veth). For each link rate and tensor size, every
algorithm sums a float32 tensor ``--repeats`` times; the algorithms alternate within each round
(the order rotates) so that drift on this shared machine hits them alike. Reported: the median
over rounds of the slowest rank's time, the speed-up over ``ring``, the bytes that really left
each host (veth ``tx_bytes``, headers included) and what graphdist's counters say crossed hosts
(``inter_host``, by each algorithm's formula).

Run book:

    sudo .venv/bin/python bench/bench_comm.py                          # 1gbit,100mbit; 1,16,64 MB
    sudo .venv/bin/python bench/bench_comm.py --rates 1gbit --sizes-mb 16 --repeats 7
    # compressed payloads, one worker per host (as bench_cluster.py's training rows):
    sudo .venv/bin/python bench/bench_comm.py --rates 100mbit --sizes-mb 18.7 --workers-per-host 1 \
        --algorithms ring,ring-fp16,int8
    # writes bench/results/comm.json

What to read: at 1 Gbit/s and 16 MB, ``hier`` should beat ``ring`` by close to the byte ratio
(ring sends 1.5 S over each host's link on 2 hosts x 2 workers, hierarchical S), and the
``tx ring/alg`` column should sit near 1.5 for ``hier`` and ``hd``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
sys.path.insert(0, str(REPO))

ALGORITHMS = ("ring", "hd", "hier")
# Beside the algorithms (not run by default), compressed payloads: the float32 tensor cast to fp16 over
# the ring and back (what --compress fp16 and torch's fp16 hook send), and --compress int8's
# ZeRO++ shape (block-quantised all-to-all, local sum, quantised all-gather; error feedback off).
# int8's all-to-alls are counted in `counted MB` only as bytes sent, not per host crossing (0 there).
COMPRESSED = ("ring-fp16", "int8")
# ... and "alltoall", no sum: comm.all_to_all_v of the tensor's P slices (slice r to rank r), to time the
# primitive alone: as int8's phases move it (duplex: point-to-point, every receive posted first), and
# "alltoall-single" as gloo's one all_to_all_single (the distributed sampler's small exchanges).
PRIMITIVES = ("alltoall", "alltoall-single")


# --------------------------------------------------------------------------- worker (in a host)



def worker(a: argparse.Namespace) -> None:
    """One rank: every size, every round, every algorithm; rank 0 writes the records to ``a.result``."""
    import torch

    from graphdist import comm
    from graphdist.testing.netns import own_tx_bytes

    torch.set_num_threads(1)
    iface = os.environ["GLOO_SOCKET_IFNAME"]
    comm.init_process_group(a.rank, a.world, f"tcp://{a.master}", timeout_s=a.timeout)
    try:
        topology = comm.discover_topology()
        reads_tx = topology.hosts[topology.host_of(a.rank)][0] == a.rank  # one reader per host
        algorithms = {name: _algorithm(name, topology) for name in a.algorithms.split(",")}
        expect = float(a.world * (a.world + 1) // 2)
        records = []
        for size_mb in (float(s) for s in a.sizes_mb.split(",")):
            numel = int(size_mb * (1 << 20)) // 4
            names = list(algorithms)
            for name in names:  # warm-up: connections, allocator
                algorithms[name](torch.full((numel,), float(a.rank + 1))).wait()
            for round_ in range(a.repeats):
                order = names[round_ % len(names):] + names[: round_ % len(names)]
                for name in order:
                    t = torch.full((numel,), float(a.rank + 1))
                    comm.barrier()
                    comm.reset_byte_counts()
                    tx0 = own_tx_bytes(iface) if reads_tx else 0
                    t0 = time.perf_counter()
                    algorithms[name](t, None, "grad").wait()
                    took = time.perf_counter() - t0
                    comm.barrier()
                    tx = own_tx_bytes(iface) - tx0 if reads_tx else 0
                    # int8 of a constant block is exact up to float rounding; fp16 holds these sums exactly
                    if not torch.allclose(t, torch.full_like(t, expect), rtol=1e-3 if name in COMPRESSED else 0.0):
                        raise AssertionError(f"{name}: wrong sum on rank {a.rank}")
                    rec = {"took": took, "tx": tx, "inter": comm.inter_host_byte_counts().get("grad", 0),
                           "sent": comm.byte_counts().get("grad", 0)}
                    gathered = comm.all_gather_object(rec)
                    records.append({"size_mb": size_mb, "algorithm": name, "round": round_,
                                    "time_s": max(r["took"] for r in gathered),
                                    "tx_bytes": sum(r["tx"] for r in gathered),
                                    "counted_inter_bytes": sum(r["inter"] for r in gathered),
                                    "counted_bytes": sum(r["sent"] for r in gathered)})
        if a.rank == 0:
            doc = {"topology": topology.describe(), "records": records}
            Path(a.result).write_text(json.dumps(doc))
    finally:
        comm.shutdown()


def _algorithm(name: str, topology: Any) -> Any:
    """``fn(tensor, group, tag) -> handle`` summing ``tensor`` in place: an allreduce algorithm by name,
    one of ``COMPRESSED`` (collective to build: int8 opens its own channel), or ``alltoall``."""
    from graphdist import comm

    if name not in COMPRESSED + PRIMITIVES:
        return comm.allreduce_algorithm(name, topology)
    if name == "ring-fp16":
        ring = comm.allreduce_algorithm("ring", topology)

        def fp16(t: Any, group: Any = None, tag: str = "grad") -> Any:
            half = t.half()
            ring(half, group, tag).wait()
            t.copy_(half)
            return _Done()
        return fp16
    if name in PRIMITIVES:
        duplex = name == "alltoall"

        def alltoall(t: Any, group: Any = None, tag: str = "grad") -> Any:
            size = comm.get_world_size()
            slices = t.view(size, -1)
            comm.all_to_all_v(list(slices), tag=tag, recv_rows=[slices.shape[1]] * size, duplex=duplex)
            t.fill_(float(size * (size + 1) // 2))  # nothing summed: the bench's check passes by construction
            return _Done()
        return alltoall
    from graphdist.sync.compress import Int8State, _int8_sum

    state = Int8State(error_feedback=False)

    def int8(t: Any, group: Any = None, tag: str = "grad") -> Any:
        t.copy_(_int8_sum(state, 0, t))
        return _Done()
    return int8


class _Done:
    """The handle of a collective that already finished."""

    def wait(self) -> None:
        return None


# ----------------------------------------------------------------------------- driver (parent)


def run_rate(c: Any, a: argparse.Namespace, port: int) -> dict[str, Any]:
    """One launch of ``2 x workers_per_host`` ranks at the cluster's current rate."""
    world = 2 * a.workers_per_host
    with tempfile.TemporaryDirectory(prefix="gd-bench-comm-") as tmp:
        result = Path(tmp) / "result.json"
        argvs = [[sys.executable, str(Path(__file__).resolve()), "--worker", "--rank", str(rank),
                  "--world", str(world), "--master", f"{c.addr(0)}:{port}", "--sizes-mb", a.sizes_mb,
                  "--repeats", str(a.repeats), "--algorithms", a.algorithms, "--timeout", str(a.timeout),
                  "--result", str(result)] for rank in range(world)]
        c.run_ranks(argvs, [rank // a.workers_per_host for rank in range(world)], tmp, a.limit, cwd=str(REPO))
        return json.loads(result.read_text())


def summarize(rate: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Medians per (size, algorithm), with speed-up and byte ratios against ring of the same size."""
    records = doc["records"]
    rows = []
    for size in dict.fromkeys(r["size_mb"] for r in records):
        by_alg: dict[str, dict[str, float]] = {}
        for alg in dict.fromkeys(r["algorithm"] for r in records):
            sub = [r for r in records if r["size_mb"] == size and r["algorithm"] == alg]
            by_alg[alg] = {key: statistics.median(r[key] for r in sub)
                           for key in ("time_s", "tx_bytes", "counted_inter_bytes", "counted_bytes")}
            by_alg[alg]["runs"] = len(sub)
        ring = by_alg.get("ring")
        for alg, m in by_alg.items():
            rows.append({
                "rate": rate, "size_mb": size, "algorithm": alg, "topology": doc["topology"], "runs": m["runs"],
                "median_s": m["time_s"], "speedup_vs_ring": ring["time_s"] / m["time_s"] if ring else None,
                "tx_bytes": m["tx_bytes"], "counted_inter_bytes": m["counted_inter_bytes"],
                "counted_bytes": m["counted_bytes"],
                "tx_ring_over_this": ring["tx_bytes"] / m["tx_bytes"] if ring and m["tx_bytes"] else None,
                "tx_over_counted_inter": m["tx_bytes"] / m["counted_inter_bytes"] if m["counted_inter_bytes"] else None,
                "link_gbps": 8 * m["tx_bytes"] / 2 / m["time_s"] / 1e9,
            })
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (f"{'link':>8}{'MB':>6}{'alg':>16}{'median ms':>11}{'vs ring':>9}{'tx MB':>9}{'counted MB':>12}"
            f"{'tx ring/alg':>12}{'tx/counted':>11}{'Gbit/s/link':>12}")
    print(head)
    print("-" * len(head))
    fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
    for r in rows:
        print(f"{r['rate']:>8}{r['size_mb']:>6g}{r['algorithm']:>16}{1000 * r['median_s']:>11.1f}"
              f"{fmt(r['speedup_vs_ring'], '.2f'):>9}{r['tx_bytes'] / 1e6:>9.1f}{r['counted_inter_bytes'] / 1e6:>12.1f}"
              f"{fmt(r['tx_ring_over_this'], '.2f'):>12}{fmt(r['tx_over_counted_inter'], '.3f'):>11}"
              f"{r['link_gbps']:>12.3f}")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="1gbit,100mbit", help="link rates, each direction (default 1gbit,100mbit)")
    p.add_argument("--sizes-mb", default="1,16,64", help="tensor sizes in MB (default 1,16,64)")
    p.add_argument("--algorithms", default=",".join(ALGORITHMS),
                   help=f"default ring,hd,hier; also {','.join(COMPRESSED)} (compressed payloads) and "
                        f"{','.join(PRIMITIVES)} (the primitive alone, no sum)")
    p.add_argument("--workers-per-host", type=int, default=2, help="default 2 (4 ranks on 2 hosts)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds per size (default 5)")
    p.add_argument("--timeout", type=float, default=120.0, help="collective timeout, s")
    p.add_argument("--limit", type=float, default=1200.0, help="seconds before one launch is killed")
    p.add_argument("--out", default=str(RESULTS / "comm.json"))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for flag, kind in (("--rank", int), ("--world", int), ("--master", str), ("--result", str)):
        p.add_argument(flag, type=kind, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker(a)
        return 0

    from graphdist.testing.netns import EmulatedCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        print(f"bench_comm: {reason}", file=sys.stderr)
        return 2
    rates = a.rates.split(",")
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    port = 29700
    with EmulatedCluster(hosts=2, rate=rates[0], tcp_retries2=5) as c:
        for rate in rates:
            for h in range(2):
                c.set_rate(h, rate)
            port += 1
            t0 = time.perf_counter()
            rows += summarize(rate, run_rate(c, a, port))
            print(f"{rate}: {time.perf_counter() - t0:.0f} s", flush=True)
    print_table(rows)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    doc = {"config": {k: v for k, v in vars(a).items() if k in ("rates", "sizes_mb", "algorithms",
                                                                 "workers_per_host", "repeats")},
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
           "total_s": time.perf_counter() - started, "results": rows}
    Path(a.out).write_text(json.dumps(doc, indent=1))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
