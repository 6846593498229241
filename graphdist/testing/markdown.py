"""Markdown helpers the docs tests share (``tests/test_docs.py``, ``tests/test_citations.py``)."""

from __future__ import annotations

import re


def slug(heading: str) -> str:
    """GitHub's anchor for a heading.

    Example:
        >>> slug("A dead host takes 15 minutes to notice: `tcp_retries2`")
        'a-dead-host-takes-15-minutes-to-notice-tcp_retries2'
        >>> slug("DWBP's timing model")
        'dwbps-timing-model'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


__all__ = ["slug"]
