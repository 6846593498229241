"""The iproute2 layer of the emulated cluster: ``ip``/``tc`` commands, what this machine allows, rates.

Everything here works without a cluster object: checking root and iproute2
(:func:`unavailable_reason`, :func:`netem_available`), parsing tc rates, tbf
parameters, and listing or removing the namespaces of clusters whose owner died.
:mod:`graphdist.testing.netns` has the run book.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from typing import Optional, Sequence, Union

logger = logging.getLogger(__name__)

PREFIX = "gdc"  # namespace names: gdc-<owner pid>-<n>-h<i> and ...-sw
Rate = Union[None, str, int, float]  # "1gbit", "300mbit", "100mbit", "512kbit" or bits/s; None = unshaped

_UNITS = {"": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


class ClusterError(RuntimeError):
    """An ``ip``/``tc`` command failed; the message has the command and its error."""


class ClusterUnavailable(ClusterError):
    """Root, iproute2 or a kernel feature (netns, netem) is missing; the message is one line."""


def parse_rate(rate: Rate) -> Optional[int]:
    """Bits per second of a rate (``"300mbit"``, ``"1gbit"``, ``1e8``); None stays None.

    Raises:
        ValueError: on a rate that is not a positive number with a tc bit unit.

    Example:
        >>> parse_rate("300mbit"), parse_rate("1gbit"), parse_rate(5e6)
        (300000000, 1000000000, 5000000)
    """
    if rate is None:
        return None
    if isinstance(rate, (int, float)):
        bps = float(rate)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", str(rate).lower())
        if not m or m.group(2) not in _UNITS:
            raise ValueError(f"rate: Expected a number with a unit bit/kbit/mbit/gbit, e.g. '100mbit' (got {rate!r})")
        bps = float(m.group(1)) * _UNITS[m.group(2)]
    if bps <= 0:
        raise ValueError(f"rate: Expected a positive rate (got {rate!r})")
    return int(bps)


def _run_cmd(argv: Sequence[str], check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise ClusterError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def unavailable_reason() -> Optional[str]:
    """None when clusters can be made here, else one line saying what is missing.

    Checks root, ``ip`` and ``tc`` on the PATH, and that a namespace can really be
    created (a container without CAP_SYS_ADMIN has root but no ``ip netns add``).

    Example:
        >>> reason = unavailable_reason()  # e.g. "needs root to create network namespaces (running as uid 1000)"
    """
    if os.name != "posix" or not sys.platform.startswith("linux"):
        return f"emulated clusters need Linux network namespaces (this is {sys.platform})"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"emulated clusters need iproute2 ({' and '.join(missing)} not found): apt-get install -y iproute2"
    if os.geteuid() != 0:
        return f"emulated clusters need root to create network namespaces (running as uid {os.geteuid()})"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    made = _run_cmd(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace (`ip netns add` said: {made.stderr.strip().splitlines()[-1:]})"
    _run_cmd(["ip", "netns", "del", probe], check=False)
    return None


def netem_available() -> bool:
    """Whether this kernel has ``sch_netem`` (delay/loss emulation); probed in a throw-away namespace."""
    if unavailable_reason() is not None:
        return False
    probe = f"{PREFIX}-{os.getpid()}-netem"
    _run_cmd(["ip", "netns", "add", probe])
    try:
        return _run_cmd(["ip", "-n", probe, "link", "set", "lo", "up"], check=False).returncode == 0 and _run_cmd(
            ["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"], check=False
        ).returncode == 0
    finally:
        _run_cmd(["ip", "netns", "del", probe], check=False)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_namespaces(prefix: str = PREFIX) -> list[str]:
    """Network namespaces whose name starts with ``<prefix>-`` (ours, live or stale)."""
    out = _run_cmd(["ip", "netns", "list"], check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix + "-")]


def _kill_pids(pids: list[str]) -> None:
    """SIGKILLs each pid (as ``ip netns pids`` lists them); gone ones are skipped."""
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _kill_namespace(name: str) -> None:
    """SIGKILLs whatever still runs in namespace ``name``, then deletes it."""
    _kill_pids(_run_cmd(["ip", "netns", "pids", name], check=False).stdout.split())
    # The kernel frees a namespace once its last process is gone; the name goes away at once.
    _run_cmd(["ip", "netns", "del", name], check=False)


def remove_stale(prefix: str = PREFIX) -> list[str]:
    """Deletes namespaces ``<prefix>-<pid>-...`` whose owner process is dead; returns their names.

    A live owner's namespaces are left alone: other tests may run clusters concurrently.
    """
    removed = []
    for name in list_namespaces(prefix):
        m = re.match(rf"{re.escape(prefix)}-(\d+)-", name)
        if m and not _pid_alive(int(m.group(1))):
            _kill_namespace(name)
            removed.append(name)
    if removed:
        logger.info("removed %d stale namespace(s) of dead owners: %s", len(removed), ", ".join(removed))
    return removed


def _tbf_args(bps: int) -> list[str]:
    """tbf parameters for ``bps``: a bucket of ~2 ms of traffic (>= 64 KiB, so a GSO super-packet
    fits), and a queue of ~50 ms: deep enough for TCP to fill the link, short enough not to
    turn a cut or a timeout into seconds of buffered data."""
    rate_bytes = bps / 8.0
    burst = max(64 * 1024, int(rate_bytes * 0.002))
    return ["rate", f"{bps}bit", "burst", str(burst), "latency", "50ms"]


__all__ = [
    "ClusterError",
    "ClusterUnavailable",
    "PREFIX",
    "Rate",
    "list_namespaces",
    "netem_available",
    "parse_rate",
    "remove_stale",
    "unavailable_reason",
]
