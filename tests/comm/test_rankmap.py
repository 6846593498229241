"""Halving-doubling's rank map on a BiGraph-wired topology: one flow per inter-switch link in every step."""

from __future__ import annotations

import pytest

from graphdist.comm.rankmap import (
    endpoints_by_position,
    halving_distances,
    hd_positions,
    hd_shares,
    host_endpoints,
    host_positions,
    link_flows,
)
from graphdist.comm.topology import Topology, topology_override


def _flows_per_step(spec: str, world_size: int, positions_of) -> list[tuple[int, int, int]]:
    """Per halving step (doubling repeats them in reverse): (distance, most flows on one link, two-hop flows)."""
    t = Topology.parse(spec, world_size)
    ends = endpoints_by_position(positions_of(t), t)
    out = []
    for d in halving_distances(world_size):
        links, two_hops = link_flows(ends, d)
        out.append((d, max(links.values(), default=0), two_hops))
    return out


@pytest.mark.parametrize("spec, world_size", [("8x1:bigraph", 8), ("32x1:bigraph", 32), ("8x2:bigraph", 16),
                                              ("128x1:bigraph", 128)])
def test_bigraph_map_never_puts_two_host_pairs_on_one_link(spec, world_size):
    workers = world_size // int(spec.split("x")[0])
    t = Topology.parse(spec, world_size)
    ends = endpoints_by_position(hd_positions(t), t)
    for d in halving_distances(world_size):
        links, two_hops = link_flows(ends, d)
        assert two_hops == 0, d
        if d >= t.num_hosts:  # the large steps stay inside hosts
            assert not links, d
        else:  # one host pair per link and direction: its workers' flows, all of them across halves
            assert set(links.values()) == {workers} and sum(links.values()) == world_size, (d, links)


def test_host_order_on_the_same_bigraph_doubles_up_or_takes_two_hops():
    # 8 hosts of 1 rank (K = 2): host order pairs each switch's two hosts with the same switch of the
    # other half (2 flows per link), then sends every flow between switches of one half (two hops
    # through the other half), then stays inside switches; the BiGraph map sends 8 flows over 8 links.
    assert _flows_per_step("8x1:bigraph", 8, host_positions) == [(4, 2, 0), (2, 0, 8), (1, 0, 0)]
    assert _flows_per_step("8x1:bigraph", 8, hd_positions) == [(4, 1, 0), (2, 1, 0), (1, 1, 0)]
    # 32 hosts (K = 4): 4 flows per link in the largest step
    assert _flows_per_step("32x1:bigraph", 32, host_positions)[:3] == [(16, 4, 0), (8, 0, 32), (4, 0, 32)]
    assert {m for _, m, _ in _flows_per_step("32x1:bigraph", 32, hd_positions)} == {1}
    # 8 hosts of 2: the first step stays inside hosts; then 2 flows (one host's two workers) per link
    assert _flows_per_step("8x2:bigraph", 16, hd_positions) == [(8, 0, 0), (4, 2, 0), (2, 2, 0), (1, 2, 0)]
    assert _flows_per_step("8x2:bigraph", 16, host_positions) == [(8, 0, 0), (4, 4, 0), (2, 0, 16), (1, 0, 0)]


def test_bigraph_map_moves_the_same_bytes_across_hosts_as_host_order():
    for spec, p in (("8x1:bigraph", 8), ("8x2:bigraph", 16)):
        t = Topology.parse(spec, p)
        assert hd_positions(t) != host_positions(t)
        for rank in range(p):
            assert hd_shares(hd_positions(t), t, rank) == pytest.approx(hd_shares(host_positions(t), t, rank))


def test_declaring_a_bigraph():
    t = topology_override(8, {"GRAPHDIST_TOPOLOGY": "8x1:bigraph"})
    assert t.bigraph and t.num_hosts == 8 and t.describe().endswith(", BiGraph")
    assert not topology_override(8, {"GRAPHDIST_TOPOLOGY": "8x1"}).bigraph
    assert hd_positions(Topology.parse("2x4", 8)) == host_positions(Topology.parse("2x4", 8))  # no BiGraph: as before
    # hosts in order: half 0's switch 0, its switch 1, then half 1's
    assert [(e.half, e.switch, e.port) for e in host_endpoints(8)] == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
    with pytest.raises(ValueError, match=r"GRAPHDIST_TOPOLOGY=4x2:bigraph: Expected a BiGraph of 2\*K\*K hosts.*"
                                         r"got 4 hosts of 2 ranks"):
        Topology.parse("4x2:bigraph", 8)
    with pytest.raises(ValueError, match=r"got 8 hosts of 3 ranks"):
        Topology.parse("8x3:bigraph", 24)
    with pytest.raises(ValueError, match=r"e.g. 2x2 \(got '8x1:fattree'\), or HOSTSxWORKERS:bigraph"):
        Topology.parse("8x1:fattree", 8)
    with pytest.raises(ValueError, match=r"Expected a BiGraph"):
        Topology(((0,), (1, 2)), bigraph=True)
