"""Training strategies: compose store, sampler, model and sync; hold no algorithm of their own.

- ``base``: the ``Strategy`` ABC, ``WorkerContext``, ``EpochStats``, the registry ``STRATEGIES``.
- ``run``: the one loop every strategy runs under (plan, resume, epochs, metrics, checkpoints).
- ``minibatch``: ``--strategy minibatch`` (distributed sampling, layer-wise gradient sync).
- ``evaluate``: exact full-neighbour inference and accuracy over partitions.
- ``features``: the feature table a worker serves and a batch's model inputs.
"""
