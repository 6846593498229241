"""Placement of partitions and batch shares on workers: pure, deterministic, testable without processes.

``plan.py`` holds the frozen ``Plan`` (per rank: its parts, device and batch share) and the
default planner (part i on rank i, shares in proportion to train nodes). The trainer applies a
plan; nothing here touches a process group. Mixed CPU/GPU placement from a measured
performance model (HyScale-GNN style) returns plans of the same type.

Example:
    >>> from placement import default_plan
    >>> default_plan([10, 10], batch_size=4).steps_per_epoch
    5
"""

from placement.plan import Plan, RankPlan, batch_share, default_plan, grouped_plan, steps_per_epoch

__all__ = ["Plan", "RankPlan", "batch_share", "default_plan", "grouped_plan", "steps_per_epoch"]
