"""The sync modes: the one declaration (the CLI's ``--sync`` choices and the config's check read it).

Importing it needs no torch.

Example:
    >>> list(SYNC_MODES)
    ['dwbp', 'blocking', 'ddp']
"""

# name -> what it does
SYNC_MODES: dict[str, str] = {
    "dwbp": "wait-free layer-wise: each layer's allreduce starts as soon as backward has its gradients",
    "blocking": "the same allreduce per layer, launched after backward (compute, then communicate)",
    "ddp": "torch DistributedDataParallel with the same seed-weighting hook",
}

__all__ = ["SYNC_MODES"]
