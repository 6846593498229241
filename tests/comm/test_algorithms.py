"""Allreduce algorithms equal ``dist.all_reduce``; their rank maps; a dead peer fails them fast."""

import time

import pytest
import torch

from graphdist.comm.rankmap import (
    Endpoint,
    bigraph_positions,
    cross_host_fraction,
    halving_distances,
    hd_sends,
    host_positions,
    max_flows_per_link,
)
from graphdist.comm.topology import Topology
from graphdist.testing import launch

# rank -> host key for each world size: uneven hosts (3 = 2+1) and many workers per host (8 = 2x4)
HOSTS = {2: ["a", "b"], 3: ["a", "a", "b"], 4: ["a", "a", "b", "b"], 8: ["a"] * 4 + ["b"] * 4}


def _equals_backend_body(rank: int, world_size: int) -> None:
    import torch.distributed as dist

    from graphdist import comm

    topology = Topology.from_host_keys(HOSTS[world_size])
    algorithms = [comm.allreduce_algorithm(name, topology) for name in ("hd", "hier")]
    # fewer elements than ranks; not divisible by P; big enough for 2 and 4 pieces in hd's pipeline
    sizes = [1, world_size - 1, 1000, 4097, 300_001] + ([1_100_003] if world_size < 8 else [])
    for algorithm in algorithms:
        for dtype in (torch.float32, torch.float64):
            tensors = [torch.randn(n, dtype=dtype, generator=torch.Generator().manual_seed(10 * rank + n))
                       for n in sizes]
            expect = [t.clone() for t in tensors]
            for t in expect:
                dist.all_reduce(t)
            comm.reset_byte_counts()
            # several in flight at once, as DWBP issues them, completed through futures like a hook
            futures = [algorithm(t, None, "grad").future() for t in tensors]
            for t, e, f in zip(tensors, expect, futures):
                out = comm.wait_future(f)
                assert out is t
                torch.testing.assert_close(t, e, msg=f"{algorithm!r} P={world_size} n={t.numel()}")
            formula = sum(algorithm.bytes_sent(t.numel() * t.element_size(), rank, world_size)[0] for t in tensors)
            assert comm.byte_counts()["grad"] == formula
    if world_size == 4:
        auto = comm.allreduce_algorithm("auto", topology, probe_bytes=4096, repeats=1)
        assert set(auto.timings) == {"ring", "hd", "hier"} and auto.chosen in auto.timings, auto.describe()
        t = torch.full((5,), float(rank))
        auto(t).wait()
        assert t.tolist() == [6.0] * 5


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_hd_and_hierarchical_equal_backend_allreduce(world_size):
    launch(_equals_backend_body, world_size, timeout=90)


def test_hd_and_hierarchical_equal_backend_allreduce_on_8_ranks():
    launch(_equals_backend_body, 8, timeout=150)


def _dead_peer_body(rank: int, world_size: int) -> None:
    from graphdist import comm

    topology = Topology.parse("2x2", world_size)
    algorithms = {name: comm.allreduce_algorithm(name, topology) for name in ("hd", "hier")}
    for algorithm in algorithms.values():
        algorithm(torch.ones(8)).wait()
    comm.barrier()
    if rank == 1:
        import os

        os._exit(0)  # dies between two steps; exits 0 so that the launcher waits for the others
    for name, algorithm in algorithms.items():
        start = time.monotonic()
        with pytest.raises(comm.CommError, match=rf"^\[rank {rank}\] .*allreduce failed") as failed:
            algorithm(torch.ones(1 << 16)).wait()
        assert time.monotonic() - start < 3.0 + 5.0, name
        if rank == 0:  # its first step is with rank 1 in both algorithms: the error says with whom
            assert "rank 1 at [127.0.0.1] failed" in str(failed.value), str(failed.value)


def test_dead_peer_fails_each_algorithm_within_timeout_naming_the_rank():
    launch(_dead_peer_body, 4, timeout=60, collective_timeout=3.0)


# ------------------------------------------------------------------- pure rank maps


def test_bigraph_map_has_one_flow_per_link_in_every_step():
    for endpoints in (32, 128):
        ends = bigraph_positions(endpoints)
        assert len(set(ends)) == endpoints
        assert all(max_flows_per_link(ends, d) == 1 for d in halving_distances(endpoints))
        # every step's partners sit on opposite halves
        assert all(ends[p].half != ends[p ^ d].half for d in halving_distances(endpoints) for p in range(endpoints))


def test_rank_order_on_a_bigraph_puts_several_flows_on_one_link():
    switches = ports = 4
    naive = [Endpoint(p // (switches * ports), (p // ports) % switches, p % ports) for p in range(32)]
    assert max(max_flows_per_link(naive, d) for d in halving_distances(32)) > 1


def test_bigraph_needs_2_k_squared_endpoints():
    with pytest.raises(ValueError, match=r"2\*K\*K endpoints.*got 48"):
        bigraph_positions(48)


def test_host_positions_keep_the_large_steps_inside_hosts():
    t = Topology.parse("2x2", 4)
    assert cross_host_fraction(host_positions(t), t, 0) == pytest.approx(1 / 3)  # only the S/4 steps cross
    t8 = Topology.parse("2x4", 8)
    assert cross_host_fraction(host_positions(t8), t8, 0) == pytest.approx((1 / 8) * 2 / (2 * 7 / 8))
    # uneven hosts: rank order
    assert host_positions(Topology.from_host_keys(["a", "a", "b"])) == (0, 1, 2)


@pytest.mark.parametrize("world_size", range(2, 10))
def test_hd_schedule_is_symmetric_and_sends_the_ring_bytes_for_powers_of_two(world_size):
    sends = [hd_sends(p, world_size) for p in range(world_size)]
    for p, steps in enumerate(sends):
        for peer, share in steps:
            assert (p, share) in sends[peer]  # whoever p sends to sends back as much
    if world_size & (world_size - 1) == 0:
        for steps in sends:
            assert sum(s for _, s in steps) == pytest.approx(2 * (world_size - 1) / world_size)


def test_byte_formulas_per_algorithm():
    from graphdist.comm import HalvingDoubling, Hierarchical, Ring

    t = Topology.parse("2x2", 4)
    s = 16 << 20
    ring_host = sum(Ring(t).bytes_sent(s, r, 4)[1] for r in (0, 1))
    hier_host = sum(Hierarchical.formula(s, r, 4, t)[1] for r in (0, 1))
    hd_host = sum(HalvingDoubling.formula(s, r, 4, t)[1] for r in (0, 1))
    assert ring_host == 1.5 * s and hier_host == s and hd_host == s


def test_cli_choices_are_the_registered_algorithms():
    from graphdist import comm
    from graphdist.sync.modes import ALLREDUCE_MODES

    assert set(ALLREDUCE_MODES) == set(comm.ALLREDUCE_ALGORITHMS)


def test_unknown_algorithm_names_the_known_ones():
    from graphdist import comm

    with pytest.raises(ValueError, match=r"\['auto', 'hd', 'hier', 'ring'\].*got 'tree'"):
        comm.allreduce_algorithm("tree")


def test_a_channel_is_made_once_per_process_group():
    from graphdist import comm
    from graphdist.testing import one_rank_group

    with one_rank_group():
        first = comm.channel("test")
        assert comm.channel("test") is first  # a sync rebuilt later reuses its group and thread
    with one_rank_group():
        assert comm.channel("test") is not first  # a new process group gets its own
