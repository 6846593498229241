"""Graph partitioning: graph in, checksummed partition directory out.

Holds the partitioners (``partition.methods``: ``metis``, ``random``, ``super``, ``stream``),
halo construction, the on-disk format (write, read, verify) and partition statistics.
Pure functions plus pymetis; never calls ``torch.distributed``.
"""
