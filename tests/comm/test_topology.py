"""Topology from host keys and the override; the ring's byte formula and its inter-host share."""

from __future__ import annotations

import os

import pytest
import torch

from graphdist.comm.algorithms import Ring, allreduce_algorithm
from graphdist.comm.topology import Topology, topology_override
from graphdist.testing import launch


def test_host_keys_group_ranks_whatever_the_launcher_order():
    # SLURM's cyclic distribution: ranks alternate between hosts.
    assert Topology.from_host_keys(["a", "b", "a", "b"]).hosts == ((0, 2), (1, 3))
    # Uneven hosts: 3 workers on one, 1 on another.
    t = Topology.from_host_keys(["x", "x", "y", "x"])
    assert t.hosts == ((0, 1, 3), (2,)) and t.num_hosts == 2 and t.host_of(3) == 0 and t.same_host(1, 3)
    assert not t.same_host(0, 2)
    assert t.describe() == "4 ranks on 2 hosts (3+1)"


def test_override_and_its_errors():
    assert Topology.parse("2x2", 4).hosts == ((0, 1), (2, 3))
    assert topology_override(6, {"GRAPHDIST_TOPOLOGY": "3x2"}).hosts == ((0, 1), (2, 3), (4, 5))
    assert topology_override(4, {}) is None
    with pytest.raises(ValueError, match=r"GRAPHDIST_TOPOLOGY=2x3 describes 6 ranks but the job has 4"):
        Topology.parse("2x3", 4)
    with pytest.raises(ValueError, match=r"expected HOSTSxWORKERS, e.g. 2x2 \(got '2-2'\)"):
        Topology.parse("2-2", 4)
    with pytest.raises(ValueError, match="GRAPHDIST_LINK_BPS: expected bits per second"):
        topology_override(4, {"GRAPHDIST_TOPOLOGY": "2x2", "GRAPHDIST_LINK_BPS": "fast"})
    with pytest.raises(ValueError, match="partition the ranks"):
        Topology(((0, 1), (1, 2)))


def test_ring_counts_its_formula_and_the_hops_that_cross_hosts():
    ring = Ring(Topology.parse("2x2", 4))
    # Each rank sends 2(P-1)/P of the tensor to its successor; 1->2 and 3->0 cross hosts.
    assert [ring.bytes_sent(1000, r, 4) for r in range(4)] == [(1500, 0), (1500, 1500), (1500, 0), (1500, 1500)]
    assert Ring().bytes_sent(1000, 1, 4) == (1500, 0)  # topology unknown: nothing counted across
    assert ring.bytes_sent(1000, 0, 1) == (0, 0)
    with pytest.raises(ValueError, match="allreduce algorithm in"):
        allreduce_algorithm("tree")


def _discover_body(rank: int, world_size: int) -> None:
    from graphdist import comm

    os.environ["GRAPHDIST_HOST_KEY"] = f"host{rank % 2}"  # cyclic placement, as SLURM does
    topo = comm.discover_topology()
    assert topo.hosts == ((0, 2), (1, 3)), topo
    comm.reset_byte_counts()
    t = torch.full((250,), float(rank))
    comm.allreduce_algorithm("ring", topo)(t, None, "grad").wait()
    assert torch.equal(t, torch.full((250,), 6.0))
    # Ring order 0->1->2->3->0: every hop crosses hosts in this placement.
    assert comm.byte_counts()["grad"] == 1500 and comm.inter_host_byte_counts()["grad"] == 1500
    # The override wins over the keys, on every rank alike.
    os.environ["GRAPHDIST_TOPOLOGY"] = "2x2"
    assert comm.discover_topology().hosts == ((0, 1), (2, 3))
    # A future from the handle completes with the reduced tensor.
    h = comm.allreduce_algorithm("ring")(torch.ones(3), None, "grad")
    assert comm.wait_future(h.future()).tolist() == [4.0, 4.0, 4.0]


def test_discover_topology_on_four_ranks():
    launch(_discover_body, 4, timeout=60)
