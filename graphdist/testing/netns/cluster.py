"""The emulated cluster: :class:`EmulatedCluster` (hosts as network namespaces, shaped links) and :class:`Host`.

:mod:`graphdist.testing.netns` has the picture and the run book; the ``ip``/``tc``
helpers it calls are in :mod:`graphdist.testing.netns.iproute`.
"""

from __future__ import annotations

import atexit
import ipaddress
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Mapping, Optional, Sequence, Union

from graphdist.testing.netns.iproute import (
    PREFIX,
    ClusterError,
    ClusterUnavailable,
    Rate,
    _kill_namespace,
    _kill_pids,
    _run_cmd,
    _tbf_args,
    list_namespaces,
    netem_available,
    parse_rate,
    remove_stale,
    unavailable_reason,
)
from graphdist.testing.netns.torchrun import torchrun_argv

logger = logging.getLogger(__name__)

DEFAULT_SUBNET = "10.213.0.0/24"  # private, unlikely to clash; it only exists inside our namespaces
HOST_IFACE = "eth0"  # every host's interface (names are per namespace, so all hosts use the same one)

_SEQ = itertools.count()


def own_tx_bytes(iface: str = HOST_IFACE) -> int:
    """Bytes this host's interface has sent, read from inside the host (a worker's ``/sys`` is its
    namespace's): what really crossed its link, headers included."""
    with open(f"/sys/class/net/{iface}/statistics/tx_bytes") as f:
        return int(f.read())


@dataclass(frozen=True)
class Host:
    """One emulated host.

    Attributes:
        index: 0-based host number.
        netns: its network namespace (``ip netns exec <netns> ...``).
        addr: its IPv4 address in the test subnet.
        iface: its interface inside the namespace (``GLOO_SOCKET_IFNAME``).
        port: the switch-side end of its veth (in the switch namespace).
    """

    index: int
    netns: str
    addr: str
    iface: str
    port: str


@dataclass(frozen=True)
class LinkStats:
    """Counters of a host's interface, as the kernel counts them (headers included)."""

    tx_bytes: int
    rx_bytes: int
    tx_packets: int
    rx_packets: int


class EmulatedCluster:
    """H hosts (network namespaces) joined by a switch, each link rate-limited; a context manager.

    Args:
        hosts: number of hosts (default 2).
        rate: every host link's rate in each direction (``"1gbit"``, ``"100mbit"``, bits/s),
            or one rate per host; None (default) leaves links unshaped (veth speed).
        subnet: the private IPv4 test subnet; host i gets its (i+1)-th address (default 10.213.0.0/24).
        delay: one-way delay per link, e.g. ``"5ms"`` (needs netem; see the module docstring).
        loss: packet loss per link, e.g. ``"0.1%"`` (needs netem).
        prefix: namespace name prefix (default ``gdc``); stale namespaces with it are removed at start.
        tcp_retries2: if set, ``net.ipv4.tcp_retries2`` inside every host (Linux default 15: TCP
            keeps retransmitting unacknowledged data for ~15 min before it reports the peer gone).
            torchrun's agent reads its rendezvous store with a blocking receive that has no timeout
            of its own, so after a silent cut only TCP frees it; 5 (~13 s) bounds that. Set only in
            the emulated hosts' namespaces; on real machines it is the same sysctl.
        host_cores: per host, the cores everything started in it runs on (None: every core, shared
            by all hosts). Separate machines do not share cores: ``[[0], [1]]`` gives each of 2
            hosts its own core, so one host's processes never take the other's.

    Raises:
        ClusterUnavailable: (on entry) root or iproute2 missing, or delay/loss asked without netem.
        ClusterError: an ``ip``/``tc`` command failed (everything made so far is removed).

    Example::

        with EmulatedCluster(hosts=2, rate="300mbit") as c:
            before = c.link_stats(0).tx_bytes
            c.measure_throughput(0, 1, 40_000_000) / 1e6     # ~285 (Mbit/s of payload)
            c.cut(1); ...; c.restore(1)

    Making the object needs no root (``with`` or :meth:`start` creates the namespaces):

        >>> c = EmulatedCluster(hosts=2, rate="300mbit")
        >>> c.addr(1), c.iface(1), c.rate_str(1)
        ('10.213.0.2', 'eth0', '300mbit')
    """

    def __init__(
        self,
        hosts: int = 2,
        rate: Union[Rate, Sequence[Rate]] = None,
        subnet: str = DEFAULT_SUBNET,
        delay: Optional[str] = None,
        loss: Optional[str] = None,
        prefix: str = PREFIX,
        tcp_retries2: Optional[int] = None,
        host_cores: Optional[Sequence[Sequence[int]]] = None,
    ) -> None:
        if hosts < 1:
            raise ValueError(f"hosts: Expected at least 1 (got {hosts})")
        if host_cores is not None and (len(host_cores) != hosts or not all(host_cores)):
            raise ValueError(f"host_cores: Expected one non-empty core list per host ({hosts}) (got {host_cores})")
        self.host_cores = [sorted(int(c) for c in cores) for cores in host_cores] if host_cores is not None else None
        rates = list(rate) if isinstance(rate, (list, tuple)) else [rate] * hosts
        if len(rates) != hosts:
            raise ValueError(f"rate: Expected one rate or {hosts} (one per host) (got {len(rates)})")
        self.rates = [parse_rate(r) for r in rates]
        net = ipaddress.ip_network(subnet)
        if net.num_addresses < hosts + 2:
            raise ValueError(f"subnet: {subnet} has room for {net.num_addresses - 2} hosts (asked {hosts})")
        self.subnet = net
        self.delay, self.loss = delay, loss
        self.prefix = prefix
        if tcp_retries2 is not None and not 1 <= tcp_retries2 <= 30:
            raise ValueError(f"tcp_retries2: Expected 1..30 (got {tcp_retries2})")
        self.tcp_retries2 = tcp_retries2
        self.name = f"{prefix}-{os.getpid()}-{next(_SEQ)}"
        self.switch = f"{self.name}-sw"
        addrs = list(itertools.islice(net.hosts(), hosts))
        self.hosts = [Host(i, f"{self.name}-h{i}", str(addrs[i]), HOST_IFACE, f"p{i}") for i in range(hosts)]
        self._procs: list[subprocess.Popen] = []
        self._made: list[str] = []
        self._closed = True
        self._lock = threading.Lock()
        self._old_sigterm: Any = None

    # ----------------------------------------------------------------- set-up
    def __enter__(self) -> "EmulatedCluster":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        """Creates the namespaces, the switch and the shaped links (``with`` calls it)."""
        reason = unavailable_reason()
        if reason:
            raise ClusterUnavailable(reason)
        if (self.delay or self.loss) and not netem_available():
            raise ClusterUnavailable(
                f"delay/loss emulation asked (delay={self.delay}, loss={self.loss}) but this kernel has no netem "
                "(sch_netem); only rate limiting (tbf) is available"
            )
        remove_stale(self.prefix)
        self._closed = False
        atexit.register(self.close)
        if threading.current_thread() is threading.main_thread():
            # SIGTERM (CI cancelling a job, `timeout`) would skip __exit__; turn it into SystemExit.
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                self._old_sigterm = signal.signal(signal.SIGTERM, _raise_system_exit)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        logger.info("cluster %s: %d hosts %s, rates %s", self.name, len(self.hosts),
                    ", ".join(h.addr for h in self.hosts), [self.rate_str(i) for i in range(len(self.hosts))])

    def _ip(self, netns: str, *args: str) -> None:
        _run_cmd(["ip", "-n", netns, *args])

    def _build(self) -> None:
        for ns in [self.switch] + [h.netns for h in self.hosts]:
            _run_cmd(["ip", "netns", "add", ns])
            self._made.append(ns)
            self._ip(ns, "link", "set", "lo", "up")
            if self.tcp_retries2 is not None and ns != self.switch:
                # Per network namespace (this one only), so the machine's own TCP is untouched.
                _run_cmd(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"net.ipv4.tcp_retries2={self.tcp_retries2}"])
        self._ip(self.switch, "link", "add", "br0", "type", "bridge")
        self._ip(self.switch, "link", "set", "br0", "up")
        for h in self.hosts:
            # Made inside the switch namespace, the host end moved straight into the host's:
            # no interface ever appears in the machine's own namespace.
            self._ip(self.switch, "link", "add", h.port, "type", "veth", "peer", "name", h.iface, "netns", h.netns)
            self._ip(self.switch, "link", "set", h.port, "master", "br0")
            self._ip(self.switch, "link", "set", h.port, "up")
            self._ip(h.netns, "addr", "add", f"{h.addr}/{self.subnet.prefixlen}", "dev", h.iface)
            self._ip(h.netns, "link", "set", h.iface, "up")
            self._shape(h.index)

    def _shape(self, host: int) -> None:
        """(Re)applies host ``host``'s rate on both ends of its veth: egress of each end is one direction."""
        h, bps = self.hosts[host], self.rates[host]
        for ns, dev in ((h.netns, h.iface), (self.switch, h.port)):
            _run_cmd(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)
            if bps is None and not (self.delay or self.loss):
                continue
            if self.delay or self.loss:
                spec = ["netem"] + (["delay", self.delay] if self.delay else []) + (["loss", self.loss] if self.loss else [])
                spec += ["rate", f"{bps}bit"] if bps else []
            else:
                spec = ["tbf", *_tbf_args(bps)]
            _run_cmd(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", *spec])

    def set_rate(self, host: int, rate: Rate) -> None:
        """Changes host ``host``'s link rate (both directions) while the cluster runs.

        Example::

            c.set_rate(1, "100mbit")
        """
        self.rates[host] = parse_rate(rate)
        self._shape(host)

    def rate_str(self, host: int) -> str:
        bps = self.rates[host]
        if bps is None:
            return "unshaped"
        for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
            if bps >= scale:
                return f"{bps / scale:g}{unit}"
        return f"{bps}bit"

    # ----------------------------------------------------------------- access
    def host(self, host: int) -> Host:
        return self.hosts[host]

    def addr(self, host: int) -> str:
        """Host ``host``'s IPv4 address."""
        return self.hosts[host].addr

    def iface(self, host: int) -> str:
        """Host ``host``'s interface name inside its namespace (for ``GLOO_SOCKET_IFNAME``)."""
        return self.hosts[host].iface

    def exec_argv(self, host: int, argv: Sequence[str]) -> list[str]:
        """The command line that runs ``argv`` inside host ``host`` (``ip netns exec <ns> ...``)."""
        self._check_open()
        return ["ip", "netns", "exec", self.hosts[host].netns, *map(str, argv)]

    def run(
        self,
        host: int,
        argv: Sequence[str],
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdout: Union[None, int, IO[Any]] = None,
        stderr: Union[None, int, IO[Any]] = None,
    ) -> subprocess.Popen:
        """Starts ``argv`` inside host ``host``; returns at once. The cluster stops it on exit.

        Args:
            host: host index.
            argv: the command (``[sys.executable, "-m", ...]``).
            env: variables added to (and overriding) this process's environment.
            cwd: working directory (default: this process's).
            stdout, stderr: as for ``subprocess.Popen`` (default: inherited).

        Returns:
            The ``Popen`` of ``ip netns exec`` (which execs ``argv``: same pid).

        Example::

            p = c.run(0, [sys.executable, "-c", "print(1)"], stdout=subprocess.PIPE)
        """
        full_env = {**os.environ, **(dict(env) if env else {})}
        # A session of its own: close() can signal the whole process group (torchrun's workers too).
        cores = self.host_cores[host] if self.host_cores is not None else None
        proc = subprocess.Popen(self.exec_argv(host, argv), env=full_env, cwd=cwd, stdout=stdout, stderr=stderr,
                                start_new_session=True,
                                preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
        with self._lock:
            self._procs.append(proc)
        return proc

    def run_ranks(self, argvs: Sequence[Sequence[str]], hosts: Sequence[int], log_dir: str,
                  timeout: float, cwd: Optional[str] = None) -> None:
        """Runs ``argvs[r]`` in host ``hosts[r]`` for every rank r (gloo bound to the host's interface,
        one thread each) and waits for all; each rank's output goes to ``log_dir/r<rank>.log``.

        Raises:
            ClusterError: a rank exited non-zero or ran past ``timeout`` (the logs' tails in the message).
        """
        procs = []
        for rank, (argv, host) in enumerate(zip(argvs, hosts)):
            log = open(os.path.join(log_dir, f"r{rank}.log"), "w")
            # faulthandler: a rank that aborts in native code (SIGABRT, SIGSEGV) still prints every
            # thread's Python stack into its log, so the error below says where it died.
            env = {"GLOO_SOCKET_IFNAME": self.iface(host), "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
            procs.append((self.run(host, argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd), log))
        try:
            for proc, _ in procs:
                proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            for _, log in procs:
                log.close()
        codes = [proc.poll() for proc, _ in procs]
        if any(code != 0 for code in codes):
            tails = "\n".join(open(os.path.join(log_dir, f"r{r}.log")).read()[-4000:] for r in range(len(procs)))
            raise ClusterError(f"ranks exited {codes} (None: still running after {timeout:.0f} s):\n{tails}")

    def check_output(self, host: int, argv: Sequence[str], timeout: float = 60.0,
                     env: Optional[Mapping[str, str]] = None) -> str:
        """Runs ``argv`` inside host ``host`` to completion; returns its stdout.

        Raises:
            ClusterError: on a non-zero exit (with its stderr).
        """
        full_env = {**os.environ, **(dict(env) if env else {})}
        proc = subprocess.run(self.exec_argv(host, argv), capture_output=True, text=True, timeout=timeout,
                              env=full_env)
        if proc.returncode != 0:
            raise ClusterError(f"host {host}: `{' '.join(map(str, argv))}` exited {proc.returncode}: "
                               f"{proc.stderr.strip()[-2000:]}")
        return proc.stdout

    def link_stats(self, host: int) -> LinkStats:
        """Byte and packet counters of host ``host``'s interface (what really crossed its link)."""
        self._check_open()
        h = self.hosts[host]
        out = _run_cmd(["ip", "-n", h.netns, "-s", "-j", "link", "show", "dev", h.iface]).stdout
        stats = json.loads(out)[0]["stats64"]
        return LinkStats(stats["tx"]["bytes"], stats["rx"]["bytes"], stats["tx"]["packets"], stats["rx"]["packets"])

    # ----------------------------------------------------------------- faults
    def cut(self, host: int) -> None:
        """Unplugs host ``host``: its switch port goes down, packets to and from it vanish silently.

        Processes on the host keep running and can still talk among themselves; peers
        on other hosts see no reset, only silence (as with a pulled cable), so only
        timeouts can tell them.
        """
        self._check_open()
        self._ip(self.switch, "link", "set", self.hosts[host].port, "down")

    def restore(self, host: int) -> None:
        """Plugs host ``host`` back in (its shaping is kept)."""
        self._check_open()
        self._ip(self.switch, "link", "set", self.hosts[host].port, "up")

    # ------------------------------------------------------------ measuring
    def measure_throughput(self, src: int, dst: int, nbytes: int = 40_000_000, port: int = 5201,
                           timeout: float = 120.0) -> float:
        """Payload bits/s of one TCP stream of ``nbytes`` from host ``src`` to host ``dst``.

        Timed at the receiver from the first to the last byte. A token bucket lets a
        burst through at line speed, so send enough for ~2 s at the rate you check.

        Example::

            c.measure_throughput(0, 1, 30_000_000) / 1e6   # ~95 on a 100mbit link
        """
        import graphdist.testing.netns._netprobe as _netprobe

        receiver = self.run(dst, [sys.executable, _netprobe.__file__, "recv", self.addr(dst), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            self.check_output(src, [sys.executable, _netprobe.__file__, "send", self.addr(dst), str(port),
                                    str(nbytes)], timeout=timeout)
            out, err = receiver.communicate(timeout=timeout)
        finally:
            if receiver.poll() is None:
                receiver.kill()
        if receiver.returncode != 0:
            raise ClusterError(f"throughput receiver on host {dst} failed: {err.decode().strip()[-500:]}")
        result = json.loads(out.decode().strip().splitlines()[-1])
        if result["bytes"] != nbytes:
            raise ClusterError(f"throughput probe: received {result['bytes']} of {nbytes} bytes")
        return 8.0 * result["bytes"] / max(result["seconds"], 1e-9)

    # ---------------------------------------------------------------- torchrun
    def torchrun(
        self,
        host: int,
        nproc_per_node: int,
        args: Sequence[str],
        port: int = 29400,
        env: Optional[Mapping[str, str]] = None,
        rdzv_conf: Optional[Mapping[str, Any]] = None,
        stdout: Union[None, int, IO[Any]] = None,
        stderr: Union[None, int, IO[Any]] = None,
        cwd: Optional[str] = None,
        nnodes: Optional[str] = None,
        launcher_args: Sequence[str] = (),
    ) -> subprocess.Popen:
        """Starts host ``host``'s torchrun agent with the multi-host recipe (:func:`torchrun_argv`); ``nnodes``
        ``"MIN:MAX"`` makes the job elastic (default: every host), ``launcher_args`` are more torchrun options.

        Start one per host; each runs ``nproc_per_node`` workers of ``args`` (``["-m", module, ...]``).

        Example::

            agents = [c.torchrun(h, 2, ["-m", "graphdist.cli.train", "--partitions", d]) for h in (0, 1)]

        Host 1's command line, which needs no root to build:

            >>> argv = torchrun_argv(2, 2, "10.213.0.1", 29400, False, "10.213.0.2", ["-m", "m"], python="python")
            >>> argv[argv.index("--rdzv-conf"):]
            ['--rdzv-conf', 'is_host=false', '--local-addr', '10.213.0.2', '-m', 'm']
        """
        argv = torchrun_argv(nnodes or len(self.hosts), nproc_per_node, self.addr(0), port, host == 0,
                             self.addr(host), args, rdzv_conf=rdzv_conf, launcher_args=launcher_args)
        full_env = {"GLOO_SOCKET_IFNAME": self.iface(host), **(dict(env) if env else {})}
        return self.run(host, argv, env=full_env, stdout=stdout, stderr=stderr, cwd=cwd)

    def kill_processes(self, host: int) -> None:
        """SIGKILLs every process in host ``host`` at once, as a machine that dies (an agent's process group
        would miss its workers, which have sessions of their own)."""
        _kill_pids(_run_cmd(["ip", "netns", "pids", self.host(host).netns], check=False).stdout.split())

    # ---------------------------------------------------------------- teardown
    def _check_open(self) -> None:
        if self._closed:
            raise ClusterError(f"cluster {self.name} is not running (use it inside `with EmulatedCluster(...)`)")

    def stop_processes(self, grace_s: float = 3.0) -> None:
        """Stops every process started in the hosts: SIGTERM to its group, SIGKILL after ``grace_s``."""
        with self._lock:
            procs, self._procs = list(self._procs), []
        live = [p for p in procs if p.poll() is None]
        for p in live:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in live:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in procs:
            # The group may hold children whose leader already exited.
            _signal_group(p, signal.SIGKILL)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        """Stops all processes in the hosts and deletes the namespaces; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self.stop_processes()
        finally:
            # Whatever escaped the process groups still runs in a namespace: ip netns pids finds it.
            for ns in reversed(self._made):
                _kill_namespace(ns)
            self._made.clear()
            left = [n for n in list_namespaces(self.prefix) if n.startswith(self.name + "-")]
            if self._old_sigterm is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)
                self._old_sigterm = None
            try:
                atexit.unregister(self.close)
            except Exception:  # noqa: BLE001 - interpreter shutting down
                pass
            if left:
                raise ClusterError(f"cluster {self.name}: namespaces left behind: {', '.join(left)}")


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _raise_system_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


__all__ = ["EmulatedCluster", "Host", "LinkStats"]
