"""Where workers run, for the simulator: each worker's host, the hosts' links, the machines' cores.

A :class:`Layout` describes a cluster the simulator (``placement.simulator``) predicts an epoch
for: which host each worker is on, each host's uplink, which machine each host is (emulated hosts
share one), each machine's cores, and the link behaviour the gradient and halo terms read
(latency, duplex, a token bucket's burst). Pure description: no costs here.

Example:
    >>> layout = Layout.hosts_of([2, 2], link_bps=1e9)
    >>> layout.num_hosts, layout.cross_share(0), layout.ring_bps()
    (2, 0.6666666666666666, 1000000000.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

__all__ = ["DEFAULT_LATENCY_S", "Layout"]

DEFAULT_LATENCY_S = 1e-4  # one exchange's latency over a host link, beyond what the profile measured


@dataclass(frozen=True)
class Layout:
    """Where workers run: each worker's host, each host's uplink (bits/s), the machines' cores.

    ``machine_of_host`` maps hosts onto machines (emulated hosts share one machine's cores);
    ``cores`` is per machine. ``cross`` per worker: the share of its sampling and feature traffic
    that goes to workers on other hosts (None: all of it, when there is more than one host).
    ``duplex``: the share of a link's rate each direction keeps while both directions carry bulk
    data at once, one exchange at a time from an idle link (TCP's ACKs queue behind the other
    direction's data and slow its ramp; 1: none lost); ``duplex_stream`` the same with exchanges
    kept back to back (each one issued as the one before the last lands, so the link never idles).
    Measure them (``bench/bench_simulator.py`` probes the link): this machine's emulated links
    give about 0.5 and 0.97-1.0. Only the full-graph halo model uses them (its exchanges are
    symmetric bulk transfers: one at a time under staleness 0, back to back under 1).
    ``burst_bytes``: what a rate-limited host link passes at once after idling (a token bucket's
    depth: this machine's emulated links, a cloud VM's NIC cap; 0: none). The gradient term uses it:
    a step's first ``burst_bytes`` on the wire cost no time, as far as the bucket refilled while
    the link idled since the last step's gradients.
    """

    host_of: tuple[int, ...]
    link_bps: tuple[float, ...]
    local_bps: float = 100e9
    cores: tuple[int, ...] = (1 << 16,)
    machine_of_host: tuple[int, ...] = ()
    latency_s: float = DEFAULT_LATENCY_S
    cross: Optional[tuple[float, ...]] = None
    duplex: float = 1.0
    duplex_stream: float = 1.0
    burst_bytes: float = 0.0

    @classmethod
    def one_host(cls, workers: int, cores: int = 1 << 16) -> "Layout":
        return cls(host_of=(0,) * workers, link_bps=(100e9,), cores=(cores,), machine_of_host=(0,))

    @classmethod
    def hosts_of(cls, workers_per_host: Sequence[int], link_bps: float, cores: Optional[int] = None,
                 shared_machine: bool = False, **kw: Any) -> "Layout":
        """Hosts with these worker counts and one link rate; ``shared_machine``: emulated hosts on one
        machine of ``cores`` cores, else each host its own ``cores`` (unbounded when None)."""
        host_of = tuple(h for h, n in enumerate(workers_per_host) for _ in range(n))
        hosts = len(workers_per_host)
        per = cores if cores is not None else 1 << 16
        machines = (0,) * hosts if shared_machine else tuple(range(hosts))
        return cls(host_of=host_of, link_bps=(float(link_bps),) * hosts,
                   cores=(per,) * (1 if shared_machine else hosts), machine_of_host=machines, **kw)

    @property
    def num_hosts(self) -> int:
        return len(self.link_bps)

    def machine(self, worker: int) -> int:
        host = self.host_of[worker]
        return self.machine_of_host[host] if self.machine_of_host else host

    def cores_of(self, machine: int) -> int:
        """``machine``'s cores; one value given stands for every machine."""
        return self.cores[machine] if machine < len(self.cores) else self.cores[-1]

    def bound(self, worker: int) -> bool:
        """Whether ``worker``'s threads have its own cores and no others: its host is alone on a
        machine whose cores its workers fill exactly (one thread each), as ``--bind-cores`` binds
        2+ workers, or one worker alone on a one-core machine.

        Example:
            >>> Layout.one_host(2, cores=2).bound(0), Layout.one_host(2, cores=16).bound(0)
            (True, False)
            >>> Layout.hosts_of([1, 1], 1e9, cores=1).bound(0), Layout.hosts_of([1, 1], 1e9, cores=2, shared_machine=True).bound(0)
            (True, False)
        """
        host, m = self.host_of[worker], self.machine(worker)
        on_host = sum(h == host for h in self.host_of)
        alone = all(self.machine(i) != m or self.host_of[i] == host for i in range(len(self.host_of)))
        return alone and on_host == self.cores_of(m)

    def workers_per_core(self, worker: int) -> float:
        """How many workers share each core of ``worker``'s machine."""
        m = self.machine(worker)
        return sum(self.machine(i) == m for i in range(len(self.host_of))) / self.cores_of(m)

    def cross_share(self, worker: int) -> float:
        if self.cross is not None:
            return self.cross[worker]
        others = [w for w in range(len(self.host_of)) if w != worker]
        if not others:
            return 0.0
        return sum(self.host_of[w] != self.host_of[worker] for w in others) / len(others)

    def ring_bps(self) -> float:
        """The slowest link of a ring through every worker in rank order."""
        n = len(self.host_of)
        rates = [self.local_bps if self.host_of[i] == self.host_of[(i + 1) % n]
                 else min(self.link_bps[self.host_of[i]], self.link_bps[self.host_of[(i + 1) % n]]) for i in range(n)]
        return min(rates) if n > 1 else self.local_bps
