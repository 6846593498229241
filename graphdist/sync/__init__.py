"""Gradient sync: *when* each layer communicates (scheduling) and *what* it sends (hooks).

- ``modes``: ``SYNC_MODES``, the one list of modes (imports no torch; this package's names load lazily).
- ``base``: ``GradientSync``, the per-step calls (``begin_step`` / ``finish``).
- ``factory``: ``make_sync(mode, model)``.
- ``layerwise``: ``LayerwiseSync``, DWBP's wait-free per-layer launch, or blocking after backward.
- ``hooks``: ``hook(state, bucket) -> Future[Tensor]``; the seed-weighted allreduce.
- ``ddp``: ``DdpSync``, torch DDP with the same hook.
- ``stats``: per-step and per-epoch timings; ``hidden_fraction``, the one formula.
- ``timing``: DWBP's timing model (docs/design.md#dwbps-timing-model).
- ``halo``: the halo embedding exchange of full-graph training (exact or stale).
- ``averaging``: model averagers (``average_parameters()`` + a step counter) for aggregation.

Example:
    >>> from graphdist.sync import dwbp_timing
    >>> dwbp_timing(1.0, [1.0, 1.0], [0.5, 0.5]).hidden_fraction
    0.5
"""

from graphdist._lazy import lazy_exports

_LAZY = {
    "AllreduceState": "graphdist.sync.hooks",
    "Bucket": "graphdist.sync.hooks",
    "CommHook": "graphdist.sync.hooks",
    "DdpSync": "graphdist.sync.ddp",
    "GradientSync": "graphdist.sync.base",
    "LAYERWISE_MODES": "graphdist.sync.layerwise",
    "Layer": "graphdist.sync.stats",
    "LayerTiming": "graphdist.sync.stats",
    "LayerwiseSync": "graphdist.sync.layerwise",
    "ModelAverager": "graphdist.sync.averaging",
    "NoSync": "graphdist.sync.base",
    "PeriodicAverager": "graphdist.sync.averaging",
    "TimedAverager": "graphdist.sync.averaging",
    "SYNC_MODES": "graphdist.sync.modes",
    "SeedWeights": "graphdist.sync.hooks",
    "StepStats": "graphdist.sync.stats",
    "SyncSummary": "graphdist.sync.stats",
    "TimingPrediction": "graphdist.sync.timing",
    "backward_per_layer": "graphdist.sync.stats",
    "discover_layers": "graphdist.sync.layering",
    "dwbp_timing": "graphdist.sync.timing",
    "explicit_layers": "graphdist.sync.layering",
    "hidden_fraction": "graphdist.sync.stats",
    "make_sync": "graphdist.sync.factory",
    "seed_weighted_allreduce": "graphdist.sync.hooks",
    "wait_free_witness": "graphdist.sync.stats",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
