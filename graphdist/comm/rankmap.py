"""Where each rank sits in a halving-doubling butterfly: pure functions, no processes.

Halving-doubling (``graphdist.comm.halving``) pairs position ``p`` with ``p XOR d`` at each
step, with ``d = P/2, P/4, ..., 1`` while reduce-scattering (recursive halving: half the data
is sent in the first step, a quarter in the next...) and the reverse while all-gathering. Which
rank takes which position decides which links carry those bytes:

- :func:`host_positions` (hosts x workers): the big early steps pair ranks of the same host and
  only the small late ones cross hosts, so each host sends ``2 (H-1)/H * S`` over its link for a
  tensor of S bytes (a flat ring sends ``2 (P-1)/P * S`` from each rank it has on the ring's
  host boundary: 1.5 S per host for 2 hosts x 2 workers against S here).
- :func:`bigraph_positions` (EFLOPS's BiGraph: two halves of switches, every switch of one half
  wired to every switch of the other): every step's partners sit on opposite halves, and no
  inter-switch link carries two flows in one direction in one step (:func:`max_flows_per_link`
  checks it), so each step runs at full link rate. :func:`hd_positions` uses it for the hosts of
  a topology declared BiGraph-wired (``GRAPHDIST_TOPOLOGY=8x1:bigraph``); in host order the same
  steps put two flows on one link, or route them through the other half (:func:`link_flows`).

Example:
    >>> from graphdist.comm.topology import Topology
    >>> host_positions(Topology.parse("2x2", 4))  # rank -> position
    (0, 2, 1, 3)
    >>> [(d, partner(0, d)) for d in halving_distances(4)]  # position 0: rank 1 (same host), then rank 2
    [(2, 2), (1, 1)]
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from graphdist.comm.topology import Topology


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def halving_distances(world_size: int) -> list[int]:
    """Partner distances of the reduce-scatter: ``P/2, P/4, ..., 1`` (``P`` a power of two).

    Example:
        >>> halving_distances(8)
        [4, 2, 1]
    """
    if not is_power_of_two(world_size):
        raise ValueError(f"Expected a power of two (got {world_size})")
    out, d = [], world_size // 2
    while d >= 1:
        out.append(d)
        d //= 2
    return out


def partner(position: int, distance: int) -> int:
    return position ^ distance


def host_positions(topology: Topology) -> tuple[int, ...]:
    """rank -> butterfly position that keeps the large steps inside hosts.

    With H hosts of W workers (both powers of two), worker j of host h takes position
    ``j * H + h``: the first ``log2 W`` halving steps (distances ``P/2 .. H``) pair workers of one
    host; the last ``log2 H`` (the small ones) cross hosts. Other shapes (uneven hosts, sizes
    not powers of two) keep rank order.

    Example:
        >>> host_positions(Topology.parse("2x4", 8))
        (0, 2, 4, 6, 1, 3, 5, 7)
    """
    sizes = {len(h) for h in topology.hosts}
    hosts = topology.num_hosts
    if len(sizes) != 1 or not is_power_of_two(hosts) or not is_power_of_two(sizes.pop()):
        return tuple(range(topology.world_size))
    out = [0] * topology.world_size
    for h, ranks in enumerate(topology.hosts):
        for j, rank in enumerate(ranks):
            out[rank] = j * hosts + h
    return tuple(out)


def hd_positions(topology: Topology) -> tuple[int, ...]:
    """rank -> butterfly position for halving-doubling: :func:`host_positions`, or on a BiGraph-wired
    topology (``Topology.bigraph``) the same with each host's slot taken from :func:`bigraph_positions`.

    Worker j of the host at BiGraph endpoint e takes ``j * H + b`` with b the position whose endpoint
    is e: the large steps stay inside hosts, and every step that crosses hosts pairs hosts on
    opposite halves, one host pair per inter-switch link and direction.

    Example:
        >>> hd_positions(Topology.parse("8x1:bigraph", 8))  # rank -> position
        (0, 5, 6, 3, 4, 7, 1, 2)
        >>> hd_positions(Topology.parse("8x1", 8))
        (0, 1, 2, 3, 4, 5, 6, 7)
    """
    if not topology.bigraph:
        return host_positions(topology)
    hosts = topology.num_hosts
    slot = {end: b for b, end in enumerate(bigraph_positions(hosts))}
    ends = host_endpoints(hosts)
    out = [0] * topology.world_size
    for h, ranks in enumerate(topology.hosts):
        for j, rank in enumerate(ranks):
            out[rank] = j * hosts + slot[ends[h]]
    return tuple(out)


def hd_sends(position: int, world_size: int) -> list[tuple[int, float]]:
    """What position ``position`` sends in a halving-doubling allreduce: ``(peer position, share of S)`` per step.

    For P a power of two, step ``i`` of each phase moves ``S / 2^(i+1)`` (each rank sends
    ``2 (P-1)/P * S`` in all). Otherwise (Rabenseifner's fallback) with ``P' = 2^floor(log2 P)``
    and ``r = P - P'``: positions ``2i`` (i < r) hand their whole tensor to ``2i+1`` and get the
    sum back; ``2i+1`` and positions ``>= 2r`` run the butterfly over ``P'`` virtual positions.

    Example:
        >>> hd_sends(0, 4)
        [(2, 0.5), (1, 0.25), (1, 0.25), (2, 0.5)]
        >>> hd_sends(0, 3), hd_sends(1, 3)  # position 0 hands off; 1 sums and hands back
        ([(1, 1.0)], [(2, 0.5), (2, 0.5), (0, 1.0)])
    """
    if world_size <= 1:
        return []
    base = 1 << (world_size.bit_length() - 1)
    extra = world_size - base
    if position < 2 * extra and position % 2 == 0:
        return [(position + 1, 1.0)]
    virtual = position // 2 if position < 2 * extra else position - extra

    def real(v: int) -> int:
        return 2 * v + 1 if v < extra else v + extra

    distances = halving_distances(base)
    halving = [(real(partner(virtual, d)), 0.5 ** (i + 1)) for i, d in enumerate(distances)]
    out = halving + halving[::-1]
    if position < 2 * extra:
        out.append((position - 1, 1.0))
    return out


def hd_shares(positions: Sequence[int], topology: Topology, rank: int) -> tuple[float, float]:
    """``(share of S that rank sends, share of S it sends to another host)`` in a halving-doubling allreduce.

    Example:
        >>> hd_shares(host_positions(Topology.parse("2x2", 4)), Topology.parse("2x2", 4), 0)
        (1.5, 0.5)
    """
    rank_at = {p: r for r, p in enumerate(positions)}
    sends = hd_sends(positions[rank], len(positions))
    total = sum(share for _, share in sends)
    crossing = sum(share for peer, share in sends if not topology.same_host(rank, rank_at[peer]))
    return total, crossing


def cross_host_fraction(positions: Sequence[int], topology: Topology, rank: int) -> float:
    """The share of ``rank``'s halving-doubling bytes that go to another host.

    Example:
        >>> t = Topology.parse("2x2", 4)
        >>> cross_host_fraction(host_positions(t), t, 0), cross_host_fraction(range(4), t, 0)
        (0.3333333333333333, 0.6666666666666666)
    """
    total, crossing = hd_shares(positions, topology, rank)
    return crossing / total if total else 0.0


@dataclass(frozen=True)
class Endpoint:
    """An endpoint of a BiGraph: which half, which switch of that half, which port of that switch."""

    half: int
    switch: int
    port: int


def bigraph_positions(endpoints: int) -> list[Endpoint]:
    """position -> endpoint for a BiGraph of ``endpoints = 2 * K * K`` (K a power of two) endpoints.

    K switches per half, K endpoints per switch. Position ``p``'s half is the parity of its
    set bits, so every butterfly step (one flipped bit) crosses halves. Of ``q``, the low
    ``2 log2 K`` bits of ``p`` split as ``(h, l)``: upper endpoints sit on switch ``h``, port ``l``;
    lower ones on switch ``h XOR l``, port ``h``. Flipping any one bit then sends the K endpoints of
    a switch to K different switches of the other half: one flow per link and direction.

    Raises:
        ValueError: ``endpoints`` not of the form ``2 * K * K`` with K a power of two (32, 128, 512...).

    Example:
        >>> bigraph_positions(8)[:3]
        [Endpoint(half=0, switch=0, port=0), Endpoint(half=1, switch=1, port=0), Endpoint(half=1, switch=1, port=1)]
    """
    k_bits = _k_bits(endpoints)
    low = (1 << (2 * k_bits)) - 1
    out = []
    for p in range(endpoints):
        q = p & low
        h, l = q >> k_bits, q & ((1 << k_bits) - 1)
        half = bin(p).count("1") % 2
        out.append(Endpoint(0, h, l) if half == 0 else Endpoint(1, h ^ l, h))
    return out


def host_endpoints(hosts: int) -> list[Endpoint]:
    """host -> endpoint of a BiGraph-wired topology, in its declared order: by half, then switch, then port.

    Raises:
        ValueError: ``hosts`` not of the form ``2 * K * K`` with K a power of two.

    Example:
        >>> host_endpoints(8)[5]  # K = 2: hosts 4..7 on half 1, two per switch
        Endpoint(half=1, switch=0, port=1)
    """
    k_bits = _k_bits(hosts)
    k = 1 << k_bits
    return [Endpoint(h >> (2 * k_bits), (h >> k_bits) % k, h % k) for h in range(hosts)]


def endpoints_by_position(positions: Sequence[int], topology: Topology) -> list[Endpoint]:
    """position -> the endpoint of its rank's host on a BiGraph-wired ``topology`` (workers of a host share one).

    Example:
        >>> t = Topology.parse("8x1:bigraph", 8)
        >>> endpoints_by_position(hd_positions(t), t) == bigraph_positions(8)
        True
    """
    ends = host_endpoints(topology.num_hosts)
    out = [ends[0]] * len(positions)
    for rank, p in enumerate(positions):
        out[p] = ends[topology.host_of(rank)]
    return out


def link_flows(endpoint_of: Sequence[Endpoint], distance: int) -> tuple[Counter, int]:
    """The flows of the step of ``distance``: per inter-switch link and direction, and those that need two hops.

    Every position sends to its partner. A flow between two halves uses the one link between their
    switches, keyed ``(half, from switch, to switch)``; a flow between two switches of one half has
    no direct link and goes through a switch of the other half (two hops, its route up to the
    network); a flow inside one switch uses no inter-switch link.

    Example:
        >>> ends = host_endpoints(8)  # rank order on 8 hosts: partners at distance 4 share a switch pair
        >>> link_flows(ends, 4)[0].most_common(1), link_flows(ends, 2)[1]
        ([((0, 0, 0), 2)], 8)
    """
    links: Counter = Counter()
    two_hops = 0
    for p, a in enumerate(endpoint_of):
        b = endpoint_of[partner(p, distance)]
        if a.half != b.half:
            links[(a.half, a.switch, b.switch)] += 1
        elif a.switch != b.switch:
            two_hops += 1
    return links, two_hops


def max_flows_per_link(endpoint_of: Sequence[Endpoint], distance: int) -> int:
    """The most flows any inter-switch link carries in one direction in the step of ``distance``.

    A flow between two halves uses the one link between their switches; a flow inside one half
    would need two inter-switch hops and is counted as a clash (returned as at least 2).

    Example:
        >>> ends = bigraph_positions(32)
        >>> [max_flows_per_link(ends, d) for d in halving_distances(32)]
        [1, 1, 1, 1, 1]
    """
    links, two_hops = link_flows(endpoint_of, distance)
    return max(max(links.values(), default=0), 2 if two_hops else 0)


def _k_bits(endpoints: int) -> int:
    """log2 K for a BiGraph of ``endpoints = 2 * K * K``."""
    k_bits = next((b for b in range(16) if 2 * 4 ** b == endpoints), None)
    if k_bits is None:
        raise ValueError(f"Expected a BiGraph of 2*K*K endpoints with K a power of two, e.g. 32 or 128 (got {endpoints})")
    return k_bits


__all__ = ["Endpoint", "bigraph_positions", "cross_host_fraction", "endpoints_by_position", "halving_distances",
           "hd_positions", "hd_sends", "hd_shares", "host_endpoints", "host_positions", "is_power_of_two",
           "link_flows", "max_flows_per_link", "partner"]
