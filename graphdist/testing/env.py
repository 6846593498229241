"""Skip-or-fail rule for tests whose data or privilege is missing."""

from __future__ import annotations

import os


def require(condition: bool, reason: str) -> None:
    """Skips with ``reason`` on a user's machine; fails when ``CI=true`` (CI must have everything).

    Example:
        >>> require(True, "never shown")
    """
    if condition:
        return
    import pytest

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)
