"""How much memory this process has used (what every out-of-core phase reports), and how much it may still take.

Example:
    >>> peak_rss_bytes() > 0
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def peak_rss_bytes() -> int:
    """This process's peak resident set (``VmHWM`` of ``/proc/self/status``), in bytes; 0 where unknown.

    It counts resident pages of mapped files too, which is why the out-of-core phases write
    through files and release the mapped pages they have scanned (``graphdist.data.npy``).
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def describe_peak() -> str:
    """``peak RSS 1.23 GiB`` for log lines.

    Example:
        >>> describe_peak().startswith("peak RSS ")
        True
    """
    return f"peak RSS {peak_rss_bytes() / 2**30:.2f} GiB"


def available_bytes() -> Optional[int]:
    """Memory this process can still take before the kernel's OOM killer steps in; None where unknown.

    The system's available memory (``psutil``), or less under a cgroup limit (a container, a SLURM
    job): ``psutil`` sees the whole machine, while the limit is what ends the process.

    Example:
        >>> available_bytes() > 0
        True
    """
    import psutil

    try:
        system: Optional[int] = int(psutil.virtual_memory().available)
    except (OSError, RuntimeError):  # no /proc/meminfo (a sandbox): unknown, not zero
        system = None
    room = _cgroup_room()
    known = [v for v in (system, room) if v is not None]
    return min(known) if known else None


def _cgroup_room(root: Path = Path("/sys/fs/cgroup")) -> Optional[int]:
    """Bytes left under this process's cgroup memory limit (v2, else v1); None without a limit.

    The cgroup's page cache (``inactive_file``) counts as room: the kernel reclaims it before it kills.
    """
    for limit_file, usage_file, stat_file in (("memory.max", "memory.current", "memory.stat"),
                                              ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes",
                                               "memory/memory.stat")):
        try:
            limit_text = (root / limit_file).read_text().strip()
            usage = int((root / usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if not limit_text.isdigit() or int(limit_text) >= 1 << 60:  # "max", or v1's "no limit" (a huge number)
            return None
        reclaimable = 0
        try:
            for line in (root / stat_file).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key in ("inactive_file", "total_inactive_file"):
                    reclaimable = int(value)
                    break
        except (OSError, ValueError):
            pass
        return max(0, int(limit_text) - usage + reclaimable)
    return None


__all__ = ["available_bytes", "describe_peak", "peak_rss_bytes"]
