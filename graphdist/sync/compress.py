"""Compressed gradient payloads (``--compress fp16|bf16|int8``), as hooks that wrap or replace the allreduce.

What each compression is (its cast, its bytes on the wire, its DDP wrapper, the hook that replaces the
allreduce) is declared once in ``graphdist.sync.modes.COMPRESSIONS``; this module builds the hooks.

- ``fp16`` / ``bf16``: :func:`cast_compress_wrapper` wraps any hook (torch's
  ``fp16_compress_wrapper`` shape): the bucket is cast down, the inner hook sums it through
  whatever ``--allreduce`` chose, the sum is cast back. Half the bytes; sums in 16 bits.
- ``int8``: :func:`int8_allreduce`. Values quantised with per-rank scales cannot be summed in
  flight, so it follows ZeRO++'s shape instead of an allreduce (and bypasses ``--allreduce``):
  each rank quantises its gradient in blocks of ``block`` values (one fp32 scale per block,
  ``max|x| / 127``), sends chunk ``r`` to rank ``r`` (an all-to-all), dequantises and sums the
  P copies of its own chunk in fp32, quantises the sum and all-gathers it (an all-to-all of the
  same chunk to everyone). About a quarter of fp32's bytes.
  Error feedback: what quantisation dropped on this rank (its gradient minus what it sent, and,
  for the chunk it owns, the sum minus what it gathered) is added to its next step's gradient,
  so the error does not accumulate over steps.

Bytes are counted by the collectives from the tensors they are handed (payload and scales).

Example:
    >>> import torch
    >>> x = torch.tensor([0.5, -1.0, 0.25, 2.0])
    >>> q, scales = quantize_blocks(x, block=2)
    >>> q.tolist(), [round(127 * s, 3) for s in scales.tolist()]  # each block's max maps to 127
    ([[64, -127], [16, 127]], [1.0, 2.0])
    >>> error = (x - dequantize_blocks(q, scales, block=2)).abs().view(2, 2)
    >>> bool((error <= scales.unsqueeze(1) / 2).all())  # at most half a step of its block
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from graphdist import comm
from graphdist.sync.hooks import CommHook, SeedWeights, seed_weighted_allreduce
from graphdist.sync.modes import AUTO_CANDIDATES, COMPRESSIONS, Compression
from graphdist.sync.tables import dense_parameters

# name -> the dtype a cast compression sends (fp16, bf16)
CAST_DTYPES = {name: getattr(torch, c.cast) for name, c in COMPRESSIONS.items() if c.cast}
DEFAULT_BLOCK = 512  # ZeRO++ uses 256-2048 values per scale: 0.8% of the payload for the scales


def cast_compress_wrapper(hook: CommHook, dtype: torch.dtype) -> CommHook:
    """``hook`` run on the bucket cast to ``dtype``; the future's value is cast back into the bucket.

    Example:
        >>> wrapped = cast_compress_wrapper(seed_weighted_allreduce, torch.float16)
        >>> wrapped.__name__
        'seed_weighted_allreduce_float16'
    """

    def wrapped(state, bucket):  # noqa: ANN001, ANN202 - see CommHook
        full = bucket.buffer()
        bucket.set_buffer(full.to(dtype))

        def decompress(fut: torch.futures.Future) -> torch.Tensor:
            full.copy_(fut.value())
            return full

        return hook(state, bucket).then(decompress)

    wrapped.__name__ = f"{getattr(hook, '__name__', 'hook')}_{str(dtype).replace('torch.', '')}"
    return wrapped


# ------------------------------------------------------------------------- int8


def quantize_blocks(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (numel a multiple of ``block``) as int8 ``[blocks, block]`` and one fp32 scale per block.

    Round to nearest: each value is off by at most half its block's step (``scale / 2``).
    """
    rows = x.detach().float().view(-1, block)
    scales = rows.abs().amax(dim=1) / 127.0
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    q = torch.round(rows / safe.unsqueeze(1)).clamp_(-127, 127).to(torch.int8)
    return q, scales


def dequantize_blocks(q: torch.Tensor, scales: torch.Tensor, block: int) -> torch.Tensor:
    """The fp32 values ``q * scale``, flat."""
    return (q.view(-1, block).float() * scales.unsqueeze(1)).view(-1)


def _pack(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """int8 values and fp32 scales as one byte tensor (one message per peer)."""
    return torch.cat([q.reshape(-1).view(torch.uint8), scales.contiguous().view(torch.uint8)])


def _unpack(payload: torch.Tensor, numel: int, block: int) -> torch.Tensor:
    q = payload[:numel].view(torch.int8)
    scales = payload[numel:].view(torch.float32)
    return dequantize_blocks(q, scales, block)


@dataclass
class Int8State:
    """State of :func:`int8_allreduce`, grouped by how often it is changed.

    Attributes:
        block: values per scale.
        error_feedback: add each step's quantisation residual to the next step's gradient.
        tag: byte-counter tag.
        weights: this step's seed counts (set each step by the sync).
        residuals: per layer (the bucket's name), what quantisation dropped last time (error feedback).
            Keyed by the layer, not its launch position: ``LayerwiseSync`` renumbers positions once it
            has seen a backward, and two layers of one size would swap residuals. Saved in checkpoints
            (:meth:`state_dict`), so a resumed run continues with them.

    The first construction in a process group is collective (``comm.channel("int8")``: a group and
    thread of its own, reused by later states).
    """

    # tuned often
    block: int = DEFAULT_BLOCK
    error_feedback: bool = True
    # tuned seldom
    tag: str = "grad"
    seed_weighted: bool = True
    # internal
    weights: SeedWeights = field(default=None)  # type: ignore[assignment]
    residuals: dict[Any, torch.Tensor] = field(default_factory=dict)
    _group: Any = None
    _thread: Optional[Any] = None

    def __post_init__(self) -> None:
        if not 16 <= self.block <= 65536:
            raise ValueError(f"Expected an int8 block of 16..65536 values (got {self.block})")
        if self.weights is None:
            self.weights = SeedWeights(None, self.tag, normalize=self.seed_weighted)
        if comm.is_initialized() and comm.get_world_size() > 1:
            self._group, self._thread = comm.channel("int8")

    def __repr__(self) -> str:
        return f"Int8State(block={self.block}, error_feedback={self.error_feedback})"

    def state_dict(self) -> dict[str, Any]:
        """This rank's residuals (a checkpoint's: they make the next steps' gradients)."""
        return {"residuals": {k: v.clone() for k, v in self.residuals.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.residuals = {k: v.clone() for k, v in state.get("residuals", {}).items()}


def int8_allreduce(state: Int8State, bucket):  # noqa: ANN001, ANN201 - see CommHook
    """The seed-weighted sum of the bucket over ranks, moved as block-quantised int8 (ZeRO++ shape).

    Returns at once; the two all-to-alls run on the state's thread.
    """
    buf = bucket.buffer()
    scale = state.weights.scale()
    if scale == 0.0:
        buf.zero_()
    elif scale != 1.0:
        buf.mul_(scale)
    if state._thread is None:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(buf)
        return fut
    key = bucket_key(bucket)
    host = comm.HostCopy(buf)  # a CUDA bucket's copy starts here; the thread waits for it, not the hook

    def run() -> torch.Tensor:
        buf.copy_(_int8_sum(state, key, host.wait()))
        return buf

    return comm.Handle("int8 allreduce", state._thread.submit(run), state._group, result=buf).future()


def bucket_key(bucket: Any) -> Any:
    """What identifies a bucket's layer from step to step: its name (``sync.hooks.Bucket``), else its index
    (torch's ``GradBucket``: DDP's buckets keep their order once built)."""
    name = getattr(bucket, "name", None)
    return name if name else bucket.index()


def _int8_sum(state: Int8State, key: Any, buf: torch.Tensor) -> torch.Tensor:
    size, me, block = comm.get_world_size(), comm.get_rank(), state.block
    n = buf.numel()
    chunk = -(-n // (size * block)) * block  # every chunk whole blocks, P chunks cover n
    grad = torch.zeros(size * chunk, dtype=torch.float32)
    grad[:n] = buf.detach().reshape(-1).float().cpu()
    residual = state.residuals.get(key)
    if state.error_feedback and residual is not None and residual.numel() == grad.numel():
        grad += residual
    q, scales = quantize_blocks(grad, block)
    per_rank = q.view(size, -1)
    blocks = chunk // block
    sent = [_pack(per_rank[r], scales[r * blocks : (r + 1) * blocks]) for r in range(size)]
    received = comm.all_to_all_v(sent, group=state._group, tag=state.tag, recv_rows=[sent[0].numel()] * size,
                                duplex=True)
    mine = torch.stack([_unpack(p, chunk, block) for p in received]).sum(dim=0)
    q2, s2 = quantize_blocks(mine, block)
    packed = _pack(q2, s2)
    gathered = comm.all_to_all_v([packed] * size, group=state._group, tag=state.tag,
                                 recv_rows=[packed.numel()] * size, duplex=True)
    out = torch.cat([_unpack(p, chunk, block) for p in gathered])
    if state.error_feedback:
        kept = grad - dequantize_blocks(q, scales, block)
        kept[me * chunk : (me + 1) * chunk] += mine - dequantize_blocks(q2, s2, block)
        state.residuals[key] = kept
    return out[:n].view_as(buf).to(buf.dtype)


PROBE_MIN_VALUES, PROBE_MAX_VALUES = 1 << 14, 1 << 22  # 64 KB to 16 MB of float32
# int8 is chosen only when its probe costs under this share of fp16's. The probe (no compute
# beside it) flatters int8, whose quantising and summing take CPU from backward in training:
# synthetic-1m, 2 emulated hosts, probe int8/fp16 against training int8/fp16 per step: 0.98-1.30
# against 1.10 at 1 Gbit/s, 0.70-0.84 against 0.82 at 300 Mbit/s, 0.51-0.61 at 100 Mbit/s
# (0.62 in training). With the plain minimum a 1 Gbit/s probe picked int8 in 4 of 6 runs.
INT8_MARGIN = 0.9

_AUTO_CHOICES: dict[tuple[int, int, int], "CompressionChoice"] = {}


@dataclass(frozen=True)
class CompressionChoice:
    """What ``--compress auto`` chose and the probe costs it chose by (wall + CPU s, slowest rank's medians)."""

    chosen: str
    timings: dict[str, float]
    probe_values: int

    def describe(self) -> str:
        """``compress auto: int8 (fp16 0.412 s, int8 0.221 s for a 16.0 MB probe)``, for the log.

        Example:
            >>> CompressionChoice("int8", {"fp16": 0.4, "int8": 0.2}, 1 << 20).describe()
            'compress auto: int8 (fp16 0.400 s, int8 0.200 s for a 4.0 MB probe)'
        """
        times = ", ".join(f"{name} {t:.3f} s" for name, t in self.timings.items())
        return f"compress auto: {self.chosen} ({times} for a {self.probe_values * 4 / 2**20:.1f} MB probe)"


def choose_compression(model: torch.nn.Module, algorithm: Any = None, repeats: int = 5) -> CompressionChoice:
    """``--compress auto``: fp16 or int8 from their costs on a probe the size of the model's largest
    gradient (fp16 over ``algorithm``, int8 by its all-to-alls); int8 only when clearly cheaper
    (:func:`pick_compression`). The slowest rank's cost decides, so every rank chooses alike.

    The cost is the wall time plus the CPU time of this thread: DWBP hides the wire time behind
    the layers below, not the CPU that casting, quantising and summing take from them. int8 sends
    half of fp16's bytes but quantises and sums on the CPU: it wins where the link is slow
    (synthetic-1m at 100 Mbit/s: 358 against 573 ms a step) and loses where it is fast (1 Gbit/s:
    212 against 193, although its collective alone was 82 against 87 ms). Collective (every rank,
    same point; it opens int8's channel). The choice is kept for the process group (a sync rebuilt
    every few steps, as aggregation's corrections, does not probe again). Without a group of 2+
    ranks: fp16, nothing to time.
    """
    if not comm.is_initialized() or comm.get_world_size() < 2:
        return CompressionChoice("fp16", {}, 0)
    largest = max((p.numel() for p in dense_parameters(model)), default=PROBE_MIN_VALUES)  # tables go as rows
    values = int(min(max(largest, PROBE_MIN_VALUES), PROBE_MAX_VALUES))
    state = Int8State(error_feedback=False, tag="probe")
    key = (id(state._group), comm.get_world_size(), values)
    if key in _AUTO_CHOICES:
        return _AUTO_CHOICES[key]

    def fp16(t: torch.Tensor) -> None:
        half = t.half()
        if algorithm is None:
            comm.all_reduce(half, tag="probe")
        else:
            algorithm(half, None, "probe").wait()
        t.copy_(half)

    def int8(t: torch.Tensor) -> None:
        t.copy_(_int8_sum(state, -1, t))

    probe = torch.randn(values, generator=torch.Generator().manual_seed(0))
    timings = _probe_costs({"fp16": fp16, "int8": int8}, probe, repeats)
    choice = CompressionChoice(pick_compression(timings), timings, values)
    _AUTO_CHOICES[key] = choice
    return choice


def auto_choices() -> list[CompressionChoice]:
    """The ``--compress auto`` choices this process has made (one per process group), for reports."""
    return list(_AUTO_CHOICES.values())


def pick_compression(timings: dict[str, float]) -> str:
    """int8 where its probe cost is under ``INT8_MARGIN`` of fp16's, else fp16 (same timings, same choice).

    Example:
        >>> pick_compression({"fp16": 0.0376, "int8": 0.0369}), pick_compression({"fp16": 0.364, "int8": 0.201})
        ('fp16', 'int8')
    """
    return "int8" if timings["int8"] < INT8_MARGIN * timings["fp16"] else "fp16"


def _probe_costs(fns: dict[str, Any], probe: torch.Tensor, repeats: int) -> dict[str, float]:
    """Per function, the median over ``repeats`` runs (after one warm-up each) of ``fn(probe copy)``'s
    wall plus CPU time, s, the largest over ranks (collective). The functions take turns, in an
    order that flips every round, so a slow spell of the link or the machine (a shared 2-core
    host, a TCP window that opens) falls on both alike instead of deciding the choice."""
    import time

    names = list(fns)
    for name in names:
        fns[name](probe.clone())
    costs: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            t = probe.clone()
            w0, c0 = time.perf_counter(), time.thread_time()
            fns[name](t)
            costs[name].append(time.perf_counter() - w0 + time.thread_time() - c0)
    medians = torch.tensor([sorted(costs[n])[len(costs[n]) // 2] for n in names], dtype=torch.float64)
    comm.all_reduce(medians, op="max", tag="probe")
    return {name: float(v) for name, v in zip(names, medians.tolist())}


def compression(name: str) -> Compression:
    """The declaration of ``--compress name`` (``auto`` is resolved before anything is sent).

    Raises:
        ValueError: a name no declaration has.
    """
    if name not in COMPRESSIONS:
        raise ValueError(f"Expected --compress one of {', '.join(COMPRESSIONS)} (got {name!r}; auto is resolved first)")
    return COMPRESSIONS[name]


def wire_bytes(name: str, block: int = DEFAULT_BLOCK) -> float:
    """Bytes a gradient value costs on the wire under ``--compress name``: 4 (``none``), 2 (``fp16``,
    ``bf16``), ``1 + 4 / block`` (``int8``: the value and its share of its block's float32 scale).

    What SACP's rule weighs its factors against, and what ``placement.simulator`` moves.

    Example:
        >>> wire_bytes("none"), wire_bytes("bf16"), wire_bytes("int8", block=512)
        (4.0, 2.0, 1.0078125)
    """
    return compression(name).wire_bytes(block)


def compressed_hook(name: str, algorithm: Any = None, group: Any = None, tag: str = "grad",
                    seed_weighted: bool = True, block: int = DEFAULT_BLOCK) -> tuple[CommHook, Any]:
    """``(hook, state)`` for ``--compress name`` (``none``: the plain seed-weighted allreduce).

    A compression with a ``collective`` of its own (int8) replaces the allreduce; a cast wraps it.
    Collective for ``int8`` (a group of its own). Example:
        >>> hook, state = compressed_hook("bf16")
        >>> hook.__name__, type(state).__name__
        ('seed_weighted_allreduce_bfloat16', 'AllreduceState')
    """
    import importlib

    from graphdist.sync.hooks import AllreduceState

    spec = compression(name)
    if spec.collective:
        if group is not None:
            raise ValueError(f"{name} compression runs over all ranks on its own group (got a group)")
        module, function = spec.collective.split(":")
        return getattr(importlib.import_module(module), function)(block=block, tag=tag, seed_weighted=seed_weighted)
    state = AllreduceState.create(algorithm, group, tag, seed_weighted)
    if spec.cast is None:
        return seed_weighted_allreduce, state
    return cast_compress_wrapper(seed_weighted_allreduce, CAST_DTYPES[name]), state


def int8_hook(block: int = DEFAULT_BLOCK, tag: str = "grad", seed_weighted: bool = True) -> tuple[CommHook, Int8State]:
    """``--compress int8``'s ``(hook, state)``: :func:`int8_allreduce` and its error-feedback state (collective)."""
    return int8_allreduce, Int8State(block=block, tag=tag, seed_weighted=seed_weighted)


__all__ = ["AUTO_CANDIDATES", "COMPRESSIONS", "CAST_DTYPES", "CompressionChoice", "INT8_MARGIN", "Int8State",
           "cast_compress_wrapper", "choose_compression", "compressed_hook", "compression", "int8_hook", "pick_compression",
           "dequantize_blocks", "int8_allreduce", "quantize_blocks", "wire_bytes"]
