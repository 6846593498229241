"""Which ranks share a host: the ``Topology`` that allreduce algorithms and byte counts read.

A topology is built by all-gathering each rank's host key (``discover_topology``), so a
launcher's rank order does not matter: SLURM's cyclic distribution (ranks 0, 2 on host a;
1, 3 on host b) and uneven hosts (3 workers on one, 1 on another) come out as they are.
``GRAPHDIST_TOPOLOGY=HxW`` overrides the discovery with H hosts of W consecutive ranks, so
that tests can emulate hosts on one machine; ``HxW:bigraph`` says the hosts are wired as EFLOPS's
BiGraph (``Topology.bigraph``), which halving-doubling's rank map then follows.
``GRAPHDIST_LINK_BPS`` (bits per second) records a measured inter-host link rate for the cost
formulas that need one.

Example:
    >>> t = Topology.from_host_keys(["a", "b", "a", "b"])
    >>> t.hosts, t.host_of(2), t.num_hosts
    (((0, 2), (1, 3)), 0, 2)
    >>> Topology.parse("2x2", world_size=4).hosts
    ((0, 1), (2, 3))
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

TOPOLOGY_ENV = "GRAPHDIST_TOPOLOGY"
LINK_BPS_ENV = "GRAPHDIST_LINK_BPS"


@dataclass(frozen=True)
class Topology:
    """Hosts as tuples of ranks (each host's ranks ascending, hosts by their lowest rank).

    Attributes:
        hosts: the ranks of each host.
        link_bps: measured inter-host link rate in bits/s, if known (None: not measured).
        bigraph: the hosts hang off EFLOPS's BiGraph: two halves of K switches each, every switch of
            one half wired to every switch of the other, K hosts per switch (so ``2 K^2`` hosts, K a
            power of two), in this order: half 0's switch 0 gets hosts ``0..K-1``, its switch 1 the
            next K, ..., then half 1 likewise. Each host has the same number of ranks, a power of two.
            Halving-doubling then places ranks with ``rankmap.bigraph_positions`` (default False:
            a flat network, nothing known about switches).
    """

    hosts: tuple[tuple[int, ...], ...]
    link_bps: Optional[float] = None
    bigraph: bool = False

    def __post_init__(self) -> None:
        ranks = sorted(r for host in self.hosts for r in host)
        if ranks != list(range(len(ranks))) or any(not host for host in self.hosts):
            raise ValueError(f"Expected hosts to partition the ranks 0..P-1, none empty (got {self.hosts})")
        if self.link_bps is not None and self.link_bps <= 0:
            raise ValueError(f"Expected link_bps > 0 or None (got {self.link_bps})")
        if self.bigraph:
            hosts, sizes = len(self.hosts), sorted({len(h) for h in self.hosts})
            square = any(hosts == 2 * 4**k_bits for k_bits in range(16))  # 2 K^2 hosts, K = 2^k_bits
            if not square or len(sizes) != 1 or not _power_of_two(sizes[0]):
                raise ValueError(
                    f"Expected a BiGraph of 2*K*K hosts (K a power of two: 2, 8, 32, 128...) with the same power "
                    f"of two ranks on each (got {hosts} hosts of {'/'.join(map(str, sizes))} ranks); "
                    f"e.g. {TOPOLOGY_ENV}=8x1:bigraph")

    @classmethod
    def single_host(cls, world_size: int) -> "Topology":
        """Every rank on one host.

        Example:
            >>> Topology.single_host(3).hosts
            ((0, 1, 2),)
        """
        return cls((tuple(range(world_size)),))

    @classmethod
    def from_host_keys(cls, keys: Sequence[str], link_bps: Optional[float] = None) -> "Topology":
        """Ranks grouped by equal host key, in the order each host first appears."""
        groups: dict[str, list[int]] = {}
        for rank, key in enumerate(keys):
            groups.setdefault(str(key), []).append(rank)
        return cls(tuple(tuple(g) for g in groups.values()), link_bps)

    @classmethod
    def parse(cls, spec: str, world_size: int, link_bps: Optional[float] = None) -> "Topology":
        """``"HxW"``: H hosts of W consecutive ranks; ``H*W`` must equal ``world_size``.
        ``"HxW:bigraph"``: the same hosts, wired as a BiGraph in host order (see ``bigraph``).

        Raises:
            ValueError: naming the variable, the expected form and what was received.

        Example:
            >>> Topology.parse("8x1:bigraph", 8).describe()
            '8 ranks on 8 hosts (1+1+1+1+1+1+1+1), BiGraph'
        """
        match = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*(:\s*bigraph\s*)?", spec)
        if not match:
            raise ValueError(f"{TOPOLOGY_ENV}: expected HOSTSxWORKERS, e.g. 2x2 (got {spec!r}), or "
                             f"HOSTSxWORKERS:bigraph for hosts wired as a BiGraph, e.g. 8x1:bigraph")
        hosts, per_host = int(match.group(1)), int(match.group(2))
        if hosts < 1 or per_host < 1 or hosts * per_host != world_size:
            raise ValueError(
                f"{TOPOLOGY_ENV}={spec} describes {hosts * per_host} ranks but the job has {world_size}; "
                f"e.g. {TOPOLOGY_ENV}={world_size // 2 if world_size % 2 == 0 else 1}x"
                f"{2 if world_size % 2 == 0 else world_size}"
            )
        ranks = tuple(tuple(range(h * per_host, (h + 1) * per_host)) for h in range(hosts))
        try:
            return cls(ranks, link_bps, bigraph=match.group(3) is not None)
        except ValueError as e:
            raise ValueError(f"{TOPOLOGY_ENV}={spec}: {e}") from None

    @property
    def world_size(self) -> int:
        return sum(len(h) for h in self.hosts)

    @property
    def num_hosts(self) -> int:
        return len(self.hosts)

    def host_of(self, rank: int) -> int:
        """Index of the host that runs ``rank``."""
        for i, host in enumerate(self.hosts):
            if rank in host:
                return i
        raise ValueError(f"Expected a rank in [0, {self.world_size}) (got {rank})")

    def same_host(self, a: int, b: int) -> bool:
        return self.host_of(a) == self.host_of(b)

    def describe(self) -> str:
        """``"4 ranks on 2 hosts (2+2)"``, for logs."""
        sizes = "+".join(str(len(h)) for h in self.hosts)
        rate = f", link {self.link_bps / 1e6:,.0f} Mbit/s" if self.link_bps else ""
        wiring = ", BiGraph" if self.bigraph else ""
        return (f"{self.world_size} ranks on {self.num_hosts} host{'s' if self.num_hosts > 1 else ''} "
                f"({sizes}){rate}{wiring}")


def host_key() -> str:
    """This process's host identity: ``GRAPHDIST_HOST_KEY`` if set, else hostname and address.

    The address is part of the key because emulated hosts (network namespaces, containers)
    may share one hostname.
    """
    from graphdist.comm.group import local_address

    return os.environ.get("GRAPHDIST_HOST_KEY") or f"{socket.gethostname()}/{local_address()}"


def topology_override(world_size: int, environ: Optional[Mapping[str, str]] = None) -> Optional[Topology]:
    """The topology ``GRAPHDIST_TOPOLOGY`` (and ``GRAPHDIST_LINK_BPS``) describe, or None if unset.

    Example:
        >>> topology_override(4, {"GRAPHDIST_TOPOLOGY": "2x2", "GRAPHDIST_LINK_BPS": "1e9"})
        Topology(hosts=((0, 1), (2, 3)), link_bps=1000000000.0, bigraph=False)
    """
    env = os.environ if environ is None else environ
    link = _link_bps(env)
    spec = env.get(TOPOLOGY_ENV)
    if not spec:
        return None
    return Topology.parse(spec, world_size, link)


def discover_topology(group: object = None, environ: Optional[Mapping[str, str]] = None) -> Topology:
    """Every rank's host key all-gathered into a :class:`Topology` (collective: every rank calls it).

    ``GRAPHDIST_TOPOLOGY`` overrides what the keys say (the keys are gathered anyway, so every
    rank issues the same collective whatever its environment). Without a process group: one rank.

    Example:
        >>> from graphdist.testing import one_rank_group
        >>> with one_rank_group():
        ...     discover_topology().hosts
        ((0,),)
    """
    from graphdist.comm.collectives import all_gather_object
    from graphdist.comm.group import get_world_size, is_initialized

    env = os.environ if environ is None else environ
    if not is_initialized():
        return Topology.single_host(1)
    keys = all_gather_object(host_key(), group)
    return topology_override(get_world_size(), env) or Topology.from_host_keys(keys, _link_bps(env))


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _link_bps(env: Mapping[str, str]) -> Optional[float]:
    value = env.get(LINK_BPS_ENV)
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{LINK_BPS_ENV}: expected bits per second, e.g. 1e9 (got {value!r})") from None


__all__ = ["LINK_BPS_ENV", "TOPOLOGY_ENV", "Topology", "discover_topology", "host_key", "topology_override"]
