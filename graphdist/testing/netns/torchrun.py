"""torchrun across emulated hosts: the multi-host recipe (:func:`torchrun_argv`) and :class:`TorchrunJob`.

:func:`torchrun_argv` is the same command on real machines; :class:`TorchrunJob`
starts one agent per host of a running :class:`~graphdist.testing.netns.EmulatedCluster`
and captures their output line by line.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:  # cluster.py imports torchrun_argv from here, so only for the annotation
    from graphdist.testing.netns.cluster import EmulatedCluster


class TorchrunJob:
    """One torchrun agent per host of a running cluster, their output captured line by line.

    Args:
        cluster: the running :class:`EmulatedCluster`.
        nproc_per_node: workers per host.
        args: what each worker runs (``["-m", "graphdist.cli.train", ...]``).
        port: rendezvous port on host 0 (default 29400).
        env: extra environment for every agent (``GLOO_SOCKET_IFNAME`` is set per host).
        rdzv_conf: extra ``--rdzv-conf`` entries, e.g. ``{"read_timeout": 20}``.
        cwd: working directory of the agents.
        on_line: called as ``on_line(host, line)`` from a reader thread for every output line
            (e.g. to cut a link when a line appears); must not block. What it raises, ``wait`` raises.
        nnodes: ``"MIN:MAX"`` for an elastic job (default: every host, fixed).
        hosts: the hosts whose agents start now (default all); :meth:`start_host` starts another later,
            :meth:`kill_host` takes one away (its agent and workers, at once, as a host that dies).
        launcher_args: more torchrun options (``--max-restarts``, ``--rdzv-id``, ``--monitor-interval``).

    Example::

        job = TorchrunJob(c, 2, ["-m", "graphdist.cli.train", "--partitions", d, "--epochs", "1"])
        assert job.wait(timeout=180) == [0, 0], job.output()
    """

    def __init__(
        self,
        cluster: EmulatedCluster,
        nproc_per_node: int,
        args: Sequence[str],
        port: int = 29400,
        env: Optional[Mapping[str, str]] = None,
        rdzv_conf: Optional[Mapping[str, Any]] = None,
        cwd: Optional[str] = None,
        on_line: Optional[Any] = None,
        nnodes: Optional[str] = None,
        hosts: Optional[Sequence[int]] = None,
        launcher_args: Sequence[str] = (),
    ) -> None:
        self.cluster = cluster
        self.start = time.monotonic()
        self.lines: list[tuple[float, int, str]] = []  # (seconds since start, host, line)
        self.exit_times: list[Optional[float]] = [None] * len(cluster.hosts)
        self._on_line = on_line
        self.errors: list[BaseException] = []  # raised by on_line (re-raised by wait)
        self._lock = threading.Lock()
        self._agent_args = dict(nproc_per_node=nproc_per_node, args=args, port=port, env=env, rdzv_conf=rdzv_conf,
                                cwd=cwd, nnodes=nnodes, launcher_args=launcher_args)
        self.agents: list[Optional[subprocess.Popen]] = [None] * len(cluster.hosts)
        self._readers: list[threading.Thread] = []
        for h in (range(len(cluster.hosts)) if hosts is None else hosts):
            self.start_host(h)

    def start_host(self, host: int) -> None:
        """Starts host ``host``'s agent (an elastic job's host joining); its earlier output stays in :meth:`output`."""
        a = self._agent_args
        self.agents[host] = self.cluster.torchrun(host, a["nproc_per_node"], a["args"], port=a["port"], env=a["env"],
                                                  rdzv_conf=a["rdzv_conf"], stdout=subprocess.PIPE,
                                                  stderr=subprocess.STDOUT, cwd=a["cwd"], nnodes=a["nnodes"],
                                                  launcher_args=a["launcher_args"])
        self.exit_times[host] = None
        reader = threading.Thread(target=self._read, args=(host, self.agents[host]), daemon=True)
        self._readers.append(reader)
        reader.start()

    def kill_host(self, host: int) -> None:
        """SIGKILLs host ``host``'s agent and its workers at once, as a machine that dies."""
        self.cluster.kill_processes(host)
        proc = self.agents[host]
        if proc is not None:
            proc.wait(timeout=10)

    def _read(self, host: int, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            with self._lock:
                self.lines.append((time.monotonic() - self.start, host, line))
            if self._on_line is not None:
                try:
                    self._on_line(host, line)
                except Exception as exc:  # noqa: BLE001 - keep reading; wait() reports it
                    self.errors.append(exc)
        proc.wait()
        self.exit_times[host] = time.monotonic() - self.start

    def wait(self, timeout: float) -> list[int]:
        """Waits for every agent; returns their exit codes in host order (-1: a host never started; a host
        started again: its last agent's).

        Raises:
            TimeoutError: agents still running after ``timeout`` s (named; they are stopped first).
        """
        deadline = time.monotonic() + timeout
        for t in self._readers:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.errors:
            raise self.errors[0]
        running = [h for h, p in enumerate(self.agents) if p is not None and p.poll() is None]
        if running:
            self.cluster.stop_processes()
            raise TimeoutError(f"torchrun agents on hosts {running} still running after {timeout:.0f}s; stopped. "
                               f"Last output:\n{self.output()[-3000:]}")
        return [int(p.returncode) if p is not None else -1 for p in self.agents]

    def output(self, host: Optional[int] = None) -> str:
        """Captured lines (of one host, or all, each prefixed ``[h<i> +<s>s]``)."""
        with self._lock:
            lines = list(self.lines)
        return "\n".join(f"[h{h} +{t:.1f}s] {line}" for t, h, line in lines if host is None or h == host)


def torchrun_argv(
    nnodes: Union[int, str],
    nproc_per_node: int,
    master_addr: str,
    port: int,
    is_host: bool,
    local_addr: str,
    args: Sequence[str],
    rdzv_conf: Optional[Mapping[str, Any]] = None,
    python: str = sys.executable,
    launcher_args: Sequence[str] = (),
) -> list[str]:
    """One host's torchrun command for a multi-host job (the same on real machines).

    Emulated hosts share one hostname, so c10d rendezvous cannot tell which agent
    should serve the store: host 0 says ``is_host=true``, the others ``false``
    (without it every agent waits 60 s for a store nobody started). ``--local-addr``
    makes each agent advertise its own address (rank 0's becomes ``MASTER_ADDR``).
    Bind gloo to the host's interface with ``GLOO_SOCKET_IFNAME`` in the environment.

    Args:
        nnodes: number of hosts, or ``"MIN:MAX"`` for an elastic job (torchrun re-forms it as hosts leave and join).
        nproc_per_node: workers per host.
        master_addr: host 0's address (serves the rendezvous store).
        port: the rendezvous port on host 0.
        is_host: True on host 0 only.
        local_addr: this host's address.
        args: what each worker runs, e.g. ``["-m", "graphdist.cli.train", "--partitions", "parts/x"]``.
        rdzv_conf: extra ``--rdzv-conf`` entries (e.g. ``{"read_timeout": 20}``).
        python: the interpreter (torchrun is ``python -m torch.distributed.run``).
        launcher_args: more torchrun options, e.g. ``["--max-restarts", "5", "--rdzv-id", "job-7"]``.

    Returns:
        The argv list.

    Example:
        >>> " ".join(torchrun_argv(2, 2, "10.213.0.1", 29400, True, "10.213.0.1", ["-m", "m"], python="python"))
        'python -m torch.distributed.run --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 10.213.0.1:29400 --rdzv-conf is_host=true --local-addr 10.213.0.1 -m m'
    """
    conf = {"is_host": "true" if is_host else "false", **(dict(rdzv_conf) if rdzv_conf else {})}
    return [
        python, "-m", "torch.distributed.run",
        "--nnodes", str(nnodes), "--nproc-per-node", str(nproc_per_node),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{master_addr}:{port}",
        "--rdzv-conf", ",".join(f"{k}={v}" for k, v in conf.items()),
        "--local-addr", local_addr, *map(str, launcher_args),
        *map(str, args),
    ]


__all__ = ["TorchrunJob", "torchrun_argv"]
