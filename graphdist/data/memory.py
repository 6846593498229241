"""How much memory this process has used: what every out-of-core phase reports.

Example:
    >>> peak_rss_bytes() > 0
    True
"""

from __future__ import annotations


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


__all__ = ["describe_peak", "peak_rss_bytes"]
