"""The sync modes and allreduce algorithms: the CLI's ``--sync`` and ``--allreduce`` choices.

Importing it needs no torch (the config's check reads it). ``ALLREDUCE_MODES`` names what
``graphdist.comm.ALLREDUCE_ALGORITHMS`` registers (a test keeps the two equal).

Example:
    >>> list(SYNC_MODES), list(ALLREDUCE_MODES)
    (['auto', 'dwbp', 'blocking', 'ddp'], ['auto', 'ring', 'hd', 'hier'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from graphdist.section import ConfigError, Section, check_choices, fail


@dataclass(frozen=True)
class SyncMode:
    """A gradient sync mode, and what it supports.

    Attributes:
        summary: what it does, for ``--help``.
        owns_allreduce: it runs its own allreduce (torch DDP's buckets): ``--allreduce`` does not apply.
        layerwise: it sends each layer through graphdist's hooks: ``--sacp`` and ``--sacp-override`` apply.
            A mode that owns its allreduce sends the compressions torch's DDP has a hook for
            (``Compression.ddp_wrapper``); a layer-wise mode sends them all.
        candidates: a choice among these modes, made at the run's start (``auto``), not a mode of
            its own: it sends and reads what any of them does (``graphdist.sync.choice``).
    """

    summary: str
    owns_allreduce: bool = False
    layerwise: bool = True
    candidates: tuple[str, ...] = ()

    def sends(self, compress: str) -> bool:
        """Whether this mode can send gradients as ``compress`` (``auto``: it can send one of the candidates)."""
        if self.candidates:
            return any(SYNC_MODES[name].sends(compress) for name in self.candidates)
        if compress == "auto":
            return any(self.sends(name) for name in AUTO_CANDIDATES)
        return not self.owns_allreduce or COMPRESSIONS[compress].ddp_wrapper is not None

    @property
    def compressions(self) -> tuple[str, ...]:
        """The ``--compress`` values it can send."""
        return tuple(name for name in (*COMPRESSIONS, "auto") if self.sends(name))

    @property
    def reads(self) -> frozenset[str]:
        """The options this mode reads beyond ``--sync`` and ``--compress``."""
        if self.candidates:
            return frozenset().union(*(SYNC_MODES[name].reads for name in self.candidates))
        return frozenset(({"allreduce"} if not self.owns_allreduce else set())
                         | ({"sacp", "sacp_override"} if self.layerwise else set()))


# name -> mode. The one declaration of the sync modes and what each supports.
SYNC_MODES: dict[str, SyncMode] = {
    "auto": SyncMode("ddp's buckets where the per-layer extras cannot pay for themselves (workers on one host: "
                     "loopback links), else whichever of ddp and dwbp trains faster in probe steps at start "
                     "(decided once, kept on resume)", candidates=("ddp", "dwbp")),
    "dwbp": SyncMode("wait-free layer-wise: each layer's allreduce starts as soon as backward has its gradients"),
    "blocking": SyncMode("the same allreduce per layer, launched after backward (compute, then communicate)"),
    "ddp": SyncMode("torch DistributedDataParallel with the same seed-weighting hook", owns_allreduce=True,
                    layerwise=False),
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

@dataclass(frozen=True)
class Compression:
    """A ``--compress`` value: what a gradient bucket becomes on the wire, and what can send it.

    Attributes:
        summary: what it does, for ``--help``.
        cast: the torch dtype (by name) the bucket is cast to around the allreduce, if it is a cast;
            SACP's factors and the full-graph halo rows travel in it too.
        value_bytes: bytes a gradient value costs on the wire, scales aside.
        block_scale: one float32 scale per block of values travels with them (int8).
        collective: ``"module:function"`` of a hook that replaces the allreduce (it bypasses
            ``--allreduce`` and runs over all ranks on its own group); None: the allreduce sums it.
        ddp_wrapper: the name of torch's DDP hook wrapper that sends it (``torch.distributed.
            algorithms.ddp_comm_hooks.default_hooks``); ``""``: DDP sends it as it is; None: torch DDP cannot.
        ddp_needs_gpu: torch's wrapper runs on NCCL only.
    """

    summary: str
    cast: Optional[str] = None
    value_bytes: float = 4.0
    block_scale: bool = False
    collective: Optional[str] = None
    ddp_wrapper: Optional[str] = None
    ddp_needs_gpu: bool = False

    def wire_bytes(self, block: int) -> float:
        """Bytes per gradient value on the wire, its share of its block's scale included."""
        return self.value_bytes + (4.0 / block if self.block_scale else 0.0)


# name -> compression. The one declaration: a new compression is an entry here and, for one that is not a
# cast, its hook's module (``collective``). ``auto`` (below) is a choice among AUTO_CANDIDATES, not a payload.
COMPRESSIONS: dict[str, Compression] = {
    "none": Compression("fp32 as computed", ddp_wrapper=""),
    "fp16": Compression("cast to float16 around the allreduce (half the bytes; under --sync ddp torch's "
                        "fp16_compress_wrapper)", cast="float16", value_bytes=2.0, ddp_wrapper="fp16_compress_wrapper"),
    "bf16": Compression("cast to bfloat16 around the allreduce (half the bytes, fp32's range; under ddp torch's "
                        "wrapper)", cast="bfloat16", value_bytes=2.0, ddp_wrapper="bf16_compress_wrapper",
                        ddp_needs_gpu=True),
    "int8": Compression("block-quantised int8 with one scale per 512 values and error feedback, ZeRO++ style: an "
                        "all-to-all, a local fp32 sum, an all-gather (about a quarter of the bytes; bypasses "
                        "--allreduce; not under ddp)", value_bytes=1.0, block_scale=True,
                        collective="graphdist.sync.compress:int8_hook"),
}
# What --compress auto chooses between, cheapest to run first: bf16 costs what fp16 costs, "none" twice the bytes.
AUTO_CANDIDATES = ("fp16", "int8")

# name -> what a gradient bucket becomes on the wire: the --compress choices
COMPRESS_MODES: dict[str, str] = {
    **{name: c.summary for name, c in COMPRESSIONS.items()},
    "auto": "fp16 or int8, whichever sums a probe the size of the largest gradient faster on this job's links "
            "(timed once at start, the slowest rank deciding; int8 pays on slow links); under a mode that sends "
            "one of them only (ddp: fp16), that one",
}


def auto_without_probe(sync: str) -> Optional[str]:
    """``--compress auto`` under a sync mode that can send one candidate only: that one, no probe (None: probe).

    Example:
        >>> auto_without_probe("ddp"), auto_without_probe("dwbp")
        ('fp16', None)
    """
    able = [name for name in AUTO_CANDIDATES if SYNC_MODES[sync].sends(name)]
    return able[0] if len(able) == 1 else None


# --sacp: per Linear, dense allreduce or sufficient factors, whichever sends less
SACP_MODES: dict[str, str] = {
    "auto": "on under dwbp and blocking, off under ddp (DDP sends its own buckets)",
    "on": "each Linear's gradient dense or as sufficient factors (u, v rows), by Poseidon's rule; each "
          "embedding table's dense or as the rows it looked up",
    "off": "every layer dense",
}


SACP_SCHEMES = ("dense", "sfb", "sparse")  # what one layer can be sent as (graphdist.sync.sacp)


@dataclass(frozen=True)
class SyncSection(Section):
    """The gradient sync's options (``--sync``, ``--allreduce``, ``--compress``, ``--sacp``): the sync's own checks.

    Example:
        >>> SyncSection(sync="ddp", compress="int8")
        Traceback (most recent call last):
        ...
        graphdist.section.ConfigError: --compress int8 needs --sync dwbp or --sync blocking; --sync ddp sends \
none, fp16, bf16, auto
    """

    # auto: torch DDP's buckets where per-layer sync cannot pay (one host), else the faster of ddp and dwbp in
    # probe steps at start (graphdist/sync/choice.py); dwbp: wait-free layer-wise; blocking: a comparison point
    sync: str = "auto"
    # ring on one host or NCCL (nothing to gain); across hosts the fastest of ring, hd and hier,
    # timed once at start on the largest layer's gradient
    allreduce: str = "auto"
    compress: str = "none"  # exact by default; fp16/bf16/int8 trade accuracy for bytes on slow links
    sacp: str = "auto"  # exact either way; sufficient factors only where they send fewer bytes
    sacp_override: Optional[str] = None  # "LAYER=dense|sfb,...": force a scheme per layer (debugging)

    def check(self) -> None:
        check_choices(("sync", self.sync, SYNC_MODES), ("allreduce", self.allreduce, ALLREDUCE_MODES),
                      ("compress", self.compress, COMPRESS_MODES), ("sacp", self.sacp, SACP_MODES))
        mode = SYNC_MODES[self.sync]
        if not mode.sends(self.compress):
            able = [name for name, other in SYNC_MODES.items()
                    if self.compress in other.compressions and not other.candidates]
            raise ConfigError("compress", "needs " + " or ".join(f"{{{i}}}" for i in range(len(able))),
                              hint=f"{{{len(able)}}} sends {', '.join(mode.compressions)}",
                              mentions=(*(("sync", name) for name in able), ("sync", self.sync)), at=self.compress)
        if self.sacp_override:
            parse_sacp_overrides(self.sacp_override)


def parse_sacp_overrides(text: str) -> dict[str, str]:
    """``"layers.1.lin=sfb,layers.0.lin=dense"`` as a dict (``--sacp-override``; ``sparse`` for tables).

    Raises:
        ConfigError: an entry that is not ``NAME=dense``, ``NAME=sfb`` or ``NAME=sparse``.

    Example:
        >>> parse_sacp_overrides("layers.1.lin=sfb")
        {'layers.1.lin': 'sfb'}
    """
    out = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, _, scheme = entry.partition("=")
        if not name or scheme not in SACP_SCHEMES:
            raise fail("sacp-override", "expects LAYER=dense, LAYER=sfb or LAYER=sparse, e.g. layers.1.lin=sfb", entry)
        out[name.strip()] = scheme
    return out


__all__ = ["ALLREDUCE_MODES", "AUTO_CANDIDATES", "COMPRESSIONS", "COMPRESS_MODES", "Compression", "auto_without_probe", "SACP_MODES", "SACP_SCHEMES", "SYNC_MODES", "SYNC_OPTIONS", "SyncMode", "SyncSection",
           "parse_sacp_overrides"]
