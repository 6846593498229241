"""Layer-wise gradient sync (DWBP, SACP), halo embedding exchange and model averaging.

Example:
    >>> from graphdist.sync import dwbp_timing
    >>> dwbp_timing(1.0, [1.0, 1.0], [0.5, 0.5]).hidden_fraction
    0.5
"""

from graphdist.sync.layerwise import (
    MODES,
    Layer,
    LayerTiming,
    LayerwiseSync,
    LayerwiseSyncState,
    StepStats,
    SyncSummary,
    discover_layers,
    wait_free_witness,
)
from graphdist.sync.timing import TimingPrediction, dwbp_timing

__all__ = [
    "MODES",
    "Layer",
    "LayerTiming",
    "LayerwiseSync",
    "LayerwiseSyncState",
    "StepStats",
    "SyncSummary",
    "TimingPrediction",
    "discover_layers",
    "dwbp_timing",
    "wait_free_witness",
]
