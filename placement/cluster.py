"""The cluster spec: hosts, their workers (device, threads, memory, relative speed, loaders) and link rates.

Written as YAML (``--cluster cluster.yaml``)::

    hosts:
      - name: cpu-box
        link: 10gbit            # this host's link to the others
        workers:
          - {device: cpu, threads: 8, memory: 64GiB}
      - name: gpu-box
        link: 25gbit
        workers:
          - {device: "cuda:0", memory: 80GiB, speed: 6.0, loaders: 8}   # 8 loader processes feed it
    local_link: 100gbit         # between workers of one host (default 100gbit)
    duplex: 0.5                 # optional, measured: each direction's share of a link carrying both
    duplex_stream: 0.97         #   (one exchange at a time / back to back; default 1: full duplex)
    burst: 64KiB                # optional, measured: what a rate-limited link passes at once after idling
    machine_cores: 2            # optional: every host is emulated on one machine of 2 cores (network
                                #   namespaces, graphdist.testing.netns): their workers share those cores

``duplex`` and ``duplex_stream`` are what ``bench/bench_simulator.py --strategy fullgraph`` measures
on a link (the simulator's full-graph halo model reads them), ``burst`` what ``bench/bench_simulator.py``
measures (the gradient term reads it): ``placement.simulator.Layout``.
A worker's ``speed`` is its throughput relative to the others (default 1.0); the profiler's
measurements replace it when a run has them. Ranks follow the spec's order: host by host,
worker by worker. Every mistake is reported, one line each, naming where it is
(``hosts[1].workers[0].device``).

Example:
    >>> spec = parse_cluster({"hosts": [{"name": "a", "link": "1gbit", "workers": [{"device": "cpu"}] * 2}]})
    >>> spec.num_workers, spec.workers[1].host, spec.hosts[0].link_bps
    (2, 'a', 1000000000.0)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

__all__ = ["ClusterSpec", "ClusterSpecError", "HostSpec", "WorkerSpec", "local_cluster", "load_cluster",
           "parse_cluster", "parse_memory", "parse_rate"]

_RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
_MEMORY_UNITS = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 1e3, "mb": 1e6, "gb": 1e9,
                 "tb": 1e12}
_DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+)$")


class ClusterSpecError(ValueError):
    """A cluster spec with mistakes: one line per mistake."""


@dataclass(frozen=True)
class WorkerSpec:
    """One worker: its host, device, torch threads, memory (bytes), relative speed, and loader processes
    (``--loaders``: processes that sample and gather its batches; 0: its prefetch thread)."""

    host: str
    device: str
    threads: int
    memory_bytes: float
    speed: float = 1.0
    loaders: int = 0


@dataclass(frozen=True)
class HostSpec:
    """One host: its name, its link rate to the others (bits/s) and its workers."""

    name: str
    link_bps: float
    workers: tuple[WorkerSpec, ...]


@dataclass(frozen=True)
class ClusterSpec:
    """Hosts in order; ``workers`` in rank order; ``local_link_bps`` between workers of one host."""

    hosts: tuple[HostSpec, ...]
    local_link_bps: float = 100e9
    duplex: float = 1.0
    duplex_stream: float = 1.0
    burst_bytes: float = 0.0
    machine_cores: int = 0  # > 0: all hosts share one machine of this many cores (0: each host its own, unbounded)

    @property
    def workers(self) -> tuple[WorkerSpec, ...]:
        return tuple(w for h in self.hosts for w in h.workers)

    @property
    def num_workers(self) -> int:
        return len(self.workers)

    def host_of(self, rank: int) -> str:
        return self.workers[rank].host

    def link_bps(self, a: int, b: int) -> float:
        """The rate between ranks ``a`` and ``b``: the local link on one host, else the slower host link."""
        wa, wb = self.workers[a], self.workers[b]
        if wa.host == wb.host:
            return self.local_link_bps
        rate = {h.name: h.link_bps for h in self.hosts}
        return min(rate[wa.host], rate[wb.host])

    def describe(self) -> str:
        lines = [f"all hosts on one machine of {self.machine_cores} cores"] if self.machine_cores else []
        for h in self.hosts:
            lines.append(f"host {h.name} (link {h.link_bps / 1e9:g} Gbit/s): " + ", ".join(
                f"{w.device} x{w.threads} threads, {w.memory_bytes / 2**30:.1f} GiB, speed {w.speed:g}"
                + (f", {w.loaders} loader{'s' if w.loaders > 1 else ''}" if w.loaders else "") for w in h.workers))
        return "\n".join(lines)


def parse_rate(value: Any) -> float:
    """``"10gbit"``, ``"100mbit"`` or a number of bits/s -> bits/s.

    Example:
        >>> parse_rate("2.5gbit"), parse_rate(1e6)
        (2500000000.0, 1000000.0)
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-z]+)\s*", str(value).lower())
    if not m or m.group(2) not in _RATE_UNITS:
        raise ValueError(f"expected a rate like 10gbit, 100mbit or bits/s as a number (got {value!r})")
    return float(m.group(1)) * _RATE_UNITS[m.group(2)]


def parse_memory(value: Any) -> float:
    """``"64GiB"``, ``"512MiB"`` or a number of GiB -> bytes.

    Example:
        >>> parse_memory("1GiB"), parse_memory(2)
        (1073741824.0, 2147483648.0)
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) * 2**30
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]+)\s*", str(value))
    if not m or m.group(2).lower() not in _MEMORY_UNITS:
        raise ValueError(f"expected a size like 64GiB, 512MiB or a number of GiB (got {value!r})")
    return float(m.group(1)) * _MEMORY_UNITS[m.group(2).lower()]


def parse_cluster(doc: Any, source: str = "cluster spec") -> ClusterSpec:
    """A validated :class:`ClusterSpec` from a parsed YAML document.

    Raises:
        ClusterSpecError: every mistake, one line each, naming its place.
    """
    errors: list[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("hosts"), list) or not doc["hosts"]:
        raise ClusterSpecError(f"{source}: expected a mapping with a non-empty list 'hosts'")
    unknown = set(doc) - {"hosts", "local_link", "duplex", "duplex_stream", "burst", "machine_cores"}
    errors += [f"{source}: unknown key {k!r} (expected hosts, local_link, duplex, duplex_stream, burst, machine_cores)"
               for k in sorted(unknown)]
    cores = doc.get("machine_cores", 0)
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 0:
        errors.append(f"{source}: machine_cores: expected an integer >= 0 (got {cores!r})")
    local = _field(errors, f"{source}: local_link", doc.get("local_link", 100e9), parse_rate)
    duplex = {k: _field(errors, f"{source}: {k}", doc.get(k, 1.0), _share) for k in ("duplex", "duplex_stream")}
    burst = _field(errors, f"{source}: burst", doc.get("burst", 0), _burst)
    hosts, names = [], set()
    for i, h in enumerate(doc["hosts"]):
        where = f"{source}: hosts[{i}]"
        if not isinstance(h, dict):
            errors.append(f"{where}: expected a mapping with name, link and workers")
            continue
        errors += [f"{where}: unknown key {k!r} (expected name, link, workers)"
                   for k in sorted(set(h) - {"name", "link", "workers"})]
        name = str(h.get("name", f"host{i}"))
        if name in names:
            errors.append(f"{where}.name: {name!r} appears twice")
        names.add(name)
        link = _field(errors, f"{where}.link", h.get("link", "1gbit"), parse_rate)
        raw = h.get("workers")
        if not isinstance(raw, list) or not raw:
            errors.append(f"{where}.workers: expected a non-empty list of workers")
            continue
        parsed = [_worker(errors, f"{where}.workers[{j}]", name, w) for j, w in enumerate(raw)]
        workers = [w for w in parsed if w is not None]
        hosts.append(HostSpec(name=name, link_bps=link or 0.0, workers=tuple(workers)))
    if errors:
        raise ClusterSpecError("\n".join(errors))
    return ClusterSpec(hosts=tuple(hosts), local_link_bps=local or 100e9, duplex=duplex["duplex"] or 1.0,
                       duplex_stream=duplex["duplex_stream"] or 1.0, burst_bytes=burst or 0.0,
                       machine_cores=cores)


def _burst(value: Any) -> float:
    """A link's burst: ``"64KiB"``, or a number of bytes (not GiB, as a worker's memory is)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"expected a size like 64KiB or a number of bytes >= 0 (got {value!r})")
        return float(value)
    return parse_memory(value)


def _share(value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 < value <= 1.0:
        raise ValueError(f"expected a number in (0, 1] (got {value!r})")
    return float(value)


def _worker(errors: list[str], where: str, host: str, w: Any) -> Optional[WorkerSpec]:
    if not isinstance(w, dict):
        errors.append(f"{where}: expected a mapping like {{device: cpu, threads: 4, memory: 16GiB}}")
        return None
    errors += [f"{where}: unknown key {k!r} (expected device, threads, memory, speed, loaders)"
               for k in sorted(set(w) - {"device", "threads", "memory", "speed", "loaders"})]
    device = str(w.get("device", "cpu"))
    if not _DEVICE.match(device):
        errors.append(f"{where}.device: expected cpu, cuda or cuda:<i> (got {device!r})")
    threads = w.get("threads", 1)
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        errors.append(f"{where}.threads: expected an integer >= 1 (got {threads!r})")
    loaders = w.get("loaders", 0)
    if not isinstance(loaders, int) or isinstance(loaders, bool) or loaders < 0:
        errors.append(f"{where}.loaders: expected an integer >= 0 (got {loaders!r})")
    memory = _field(errors, f"{where}.memory", w.get("memory", "8GiB"), parse_memory)
    speed = w.get("speed", 1.0)
    if not isinstance(speed, (int, float)) or isinstance(speed, bool) or speed <= 0:
        errors.append(f"{where}.speed: expected a number > 0 (got {speed!r})")
    if memory is not None and memory <= 0:
        errors.append(f"{where}.memory: expected > 0 (got {w.get('memory')!r})")
    return WorkerSpec(host=host, device=device, threads=threads if isinstance(threads, int) else 1,
                      memory_bytes=memory or 0.0, speed=float(speed) if isinstance(speed, (int, float)) else 1.0,
                      loaders=loaders if isinstance(loaders, int) and loaders > 0 else 0)


def _field(errors: list[str], where: str, value: Any, parse: Any) -> Optional[float]:
    try:
        return parse(value)
    except ValueError as exc:
        errors.append(f"{where}: {exc}")
        return None


def load_cluster(path: Union[str, Path]) -> ClusterSpec:
    """Reads and validates a YAML cluster spec.

    Raises:
        ClusterSpecError: unreadable file, bad YAML or a mistaken spec (one line per mistake).
    """
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ClusterSpecError(f"--cluster {path}: cannot read it ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise ClusterSpecError(f"--cluster {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return parse_cluster(doc, source=f"--cluster {path}")


def local_cluster(num_workers: int, devices: tuple[str, ...] = ("cpu",), threads: int = 1,
                  memory_bytes: Optional[float] = None, host: str = "localhost", cores: int = 0) -> ClusterSpec:
    """This machine as a one-host spec: its memory split among the local workers (``cores``: its cores, 0 unbounded).

    Example:
        >>> local_cluster(2, memory_bytes=2**33).workers[0].memory_bytes / 2**30
        4.0
    """
    if memory_bytes is None:
        import os

        memory_bytes = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    devs = list(devices) if len(devices) == num_workers else [devices[0]] * num_workers
    workers = tuple(WorkerSpec(host=host, device=d, threads=threads, memory_bytes=memory_bytes / num_workers)
                    for d in devs)
    return ClusterSpec(hosts=(HostSpec(name=host, link_bps=100e9, workers=workers),), machine_cores=cores)
