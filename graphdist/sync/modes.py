"""The sync modes and allreduce algorithms: the CLI's ``--sync`` and ``--allreduce`` choices.

Importing it needs no torch (the config's check reads it). ``ALLREDUCE_MODES`` names what
``graphdist.comm.ALLREDUCE_ALGORITHMS`` registers (a test keeps the two equal).

Example:
    >>> list(SYNC_MODES), list(ALLREDUCE_MODES)
    (['dwbp', 'blocking', 'ddp'], ['auto', 'ring', 'hd', 'hier'])
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class SyncMode:
    """A gradient sync mode, and what it supports.

    Attributes:
        summary: what it does, for ``--help``.
        owns_allreduce: it runs its own allreduce (torch DDP's buckets): ``--allreduce`` does not apply.
        layerwise: it sends each layer through graphdist's hooks: ``--sacp`` and ``--sacp-override`` apply.
        compressions: the ``--compress`` values it can send.
    """

    summary: str
    owns_allreduce: bool = False
    layerwise: bool = True
    compressions: tuple[str, ...] = ("none", "fp16", "bf16", "int8", "auto")

    @property
    def reads(self) -> frozenset[str]:
        """The options this mode reads beyond ``--sync`` and ``--compress``."""
        return frozenset(({"allreduce"} if not self.owns_allreduce else set())
                         | ({"sacp", "sacp_override"} if self.layerwise else set()))


# name -> mode. The one declaration of the sync modes and what each supports.
SYNC_MODES: dict[str, SyncMode] = {
    "dwbp": SyncMode("wait-free layer-wise: each layer's allreduce starts as soon as backward has its gradients"),
    "blocking": SyncMode("the same allreduce per layer, launched after backward (compute, then communicate)"),
    "ddp": SyncMode("torch DistributedDataParallel with the same seed-weighting hook", owns_allreduce=True,
                    layerwise=False, compressions=("none", "fp16", "bf16", "auto")),
}
# What any mode may read: the options that apply only while gradients are synced.
SYNC_OPTIONS = frozenset({"sync", "compress", "allreduce", "sacp", "sacp_override"})

# name -> what it sends
ALLREDUCE_MODES: dict[str, str] = {
    "auto": "ring on one host or under NCCL; across hosts the fastest of the others, timed once at start",
    "ring": "the backend's allreduce (a ring): each rank sends 2(P-1)/P of the tensor",
    "hd": "halving-doubling, host-aware ranks: the big steps stay inside hosts, 2 log2 P steps",
    "hier": "reduce to each host's first rank, allreduce among those, send back: S per host link for 2 hosts",
}

# name -> what a gradient bucket becomes on the wire (``graphdist.sync.compress.COMPRESSIONS``)
COMPRESS_MODES: dict[str, str] = {
    "none": "fp32 as computed",
    "fp16": "cast to float16 around the allreduce (half the bytes; under --sync ddp torch's fp16_compress_wrapper)",
    "bf16": "cast to bfloat16 around the allreduce (half the bytes, fp32's range; under ddp torch's wrapper)",
    "int8": "block-quantised int8 with one scale per 512 values and error feedback, ZeRO++ style: an "
            "all-to-all, a local fp32 sum, an all-gather (about a quarter of the bytes; bypasses --allreduce; "
            "not under ddp)",
    "auto": "fp16 or int8, whichever sums a probe the size of the largest gradient faster on this job's links "
            "(timed once at start, the slowest rank deciding; int8 pays on slow links); fp16 under ddp",
}

# --sacp: per Linear, dense allreduce or sufficient factors, whichever sends less
SACP_MODES: dict[str, str] = {
    "auto": "on under dwbp and blocking, off under ddp (DDP sends its own buckets)",
    "on": "each Linear's gradient dense or as sufficient factors (u, v rows), by Poseidon's rule; each "
          "embedding table's dense or as the rows it looked up",
    "off": "every layer dense",
}


SACP_SCHEMES = ("dense", "sfb", "sparse")  # what one layer can be sent as (graphdist.sync.sacp)


def parse_sacp_overrides(text: str) -> dict[str, str]:
    """``"layers.1.lin=sfb,layers.0.lin=dense"`` as a dict (``--sacp-override``; ``sparse`` for tables).

    Raises:
        ValueError: an entry that is not ``NAME=dense``, ``NAME=sfb`` or ``NAME=sparse``.

    Example:
        >>> parse_sacp_overrides("layers.1.lin=sfb")
        {'layers.1.lin': 'sfb'}
    """
    out = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, _, scheme = entry.partition("=")
        if not name or scheme not in SACP_SCHEMES:
            raise ValueError(f"--sacp-override: expected LAYER=dense, LAYER=sfb or LAYER=sparse, e.g. "
                             f"layers.1.lin=sfb (got {entry!r})")
        out[name.strip()] = scheme
    return out


__all__ = ["ALLREDUCE_MODES", "COMPRESS_MODES", "SACP_MODES", "SACP_SCHEMES", "SYNC_MODES", "SYNC_OPTIONS", "SyncMode",
           "parse_sacp_overrides"]
