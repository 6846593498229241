"""Placement of partitions and batch shares on mixed CPU/GPU workers (HyScale-GNN style).

Will hold the cluster spec, the profiler (it takes a probe callable from the
trainer), the performance model, the optimizer, the run-time rebalancer and the
cluster simulator. Pure and deterministic: decisions out, the trainer applies them.
"""
