"""The argument checks of the synthetic graph generators, in memory (``synthetic``) and out of core
(``synthetic_disk``): one place, read by both, so that neither generator imports the other for it.

Example:
    >>> check_args(10, 20.0, 4, 2, 0.7, 2.5, 2.0, 0.6, 0.2, None)
    Traceback (most recent call last):
    ...
    ValueError: avg_degree: expected in [0, num_nodes - 1 = 9] (got 20.0)
"""

from __future__ import annotations

from typing import Optional


def check_args(
    num_nodes: int,
    avg_degree: float,
    num_features: int,
    num_classes: int,
    homophily: float,
    degree_exponent: float,
    feature_signal: float,
    train_frac: float,
    val_frac: float,
    max_degree: Optional[float],
) -> None:
    """Raises ValueError naming the first argument outside its range."""
    checks = [
        ("num_nodes", num_nodes, int(num_nodes) == num_nodes and num_nodes >= 2, "an integer >= 2"),
        ("avg_degree", avg_degree, 0 <= avg_degree <= num_nodes - 1, f"in [0, num_nodes - 1 = {num_nodes - 1}]"),
        ("num_features", num_features, int(num_features) == num_features and num_features >= 0, "an integer >= 0"),
        ("num_classes", num_classes, int(num_classes) == num_classes and 1 <= num_classes <= num_nodes,
         f"an integer in [1, num_nodes = {num_nodes}]"),
        ("homophily", homophily, 0.0 <= homophily <= 1.0, "in [0, 1]"),
        ("degree_exponent", degree_exponent, degree_exponent > 1.0, "> 1 (2 to 3 is typical of real graphs)"),
        ("feature_signal", feature_signal, feature_signal >= 0.0, ">= 0"),
        ("train_frac", train_frac, 0.0 <= train_frac <= 1.0, "in [0, 1]"),
        ("val_frac", val_frac, 0.0 <= val_frac <= 1.0 - train_frac, f"in [0, 1 - train_frac = {1 - train_frac:g}]"),
        ("max_degree", max_degree, max_degree is None or max_degree > 0, "> 0 or None"),
    ]
    for arg, value, ok, expected in checks:
        if not ok:
            raise ValueError(f"{arg}: expected {expected} (got {value!r})")
    if num_nodes * num_nodes >= 2**63:
        raise ValueError(f"num_nodes: expected < 3e9 so that dst * N + src fits in int64 (got {num_nodes})")


__all__ = ["check_args"]
