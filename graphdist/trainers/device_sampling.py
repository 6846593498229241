"""``--sample-on``: where a worker samples its batches, its CPU or its device, decided once per rank and kept.

On the device (``sampling.device.DeviceNeighborSampler``) the worker's CSR lives in device memory and
the loader's thread samples on a side stream, which the step's stream waits for
(``sampling.staging``). The features follow where they fit: with the CSR in ``DEVICE_SHARE`` of the
device's free memory, the table and the labels join it and batches never cross the host;
otherwise they stay in host memory (a memory-mapped table stays mapped, never copied whole): the
loader brings a batch's ids to the host, gathers its rows into a pinned buffer and copies them to
the device on the side stream. Sampling there needs the CSR of every node: one worker, or
``--replicate structure|graph`` (with ``structure`` the rows come from their owners as on the CPU
path), neighbour-sampled node batches, no ``--loaders``. ``auto`` picks the device on a CUDA worker
where all of that holds and says in one line why not where it does not; ``device`` refuses in one
line where it cannot; ``cpu`` never.

A device's generator draws differently from the CPU's, so the choice is a decision
(``WorkerContext.decisions["sample_on"]``, one entry per rank): saved in the checkpoint and
reused on resume, so a resumed run samples where it did.

Example:
    >>> sample_on_choice("cpu", torch.device("cuda:0"), None, 0)
    ('cpu', '--sample-on cpu')
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import torch

from graphdist import comm

# The share of a device's free memory the CSR and the feature table may take for sampling there.
DEVICE_SHARE = 0.5

logger = logging.getLogger(__name__)

__all__ = ["DEVICE_SHARE", "device_sources", "fits", "sample_on_choice", "sample_on_for"]


def _free_bytes(device: torch.device) -> Optional[int]:
    """Free memory of a CUDA device (None elsewhere: a CPU "device" is the host's memory)."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.mem_get_info(device)[0])


def sample_on_choice(setting: str, device: torch.device, unable: Optional[str], csr: int) -> tuple[str, str]:
    """``(cpu | device, why)`` for ``--sample-on setting`` on ``device``; ``unable`` says why batches cannot be
    sampled there (None: they can), ``csr`` the bytes the CSR takes there.

    Raises:
        ConfigError: ``device`` asked where it cannot be (``unable``) or does not fit.
    """
    from graphdist.section import fail

    if setting == "cpu":
        return "cpu", "--sample-on cpu"
    if setting == "device" and unable:
        raise fail("sample-on", f"device needs batches sampled from local sources: {unable}", setting,
                   "give {0}", ("sample_on", "cpu"))
    if setting == "auto" and (unable or device.type != "cuda"):
        return "cpu", unable or f"{device} is the host"
    if not fits(device, csr):
        words = f"the CSR ({csr / 2**30:.2f} GiB) exceeds {DEVICE_SHARE:.0%} of {device}'s free memory"
        if setting == "device":
            raise fail("sample-on", f"device: {words}", setting, "give {0}", ("sample_on", "cpu"))
        return "cpu", words
    return "device", f"the CSR ({csr / 2**20:.0f} MiB) on {device}"


def fits(device: torch.device, nbytes: int) -> bool:
    """Whether ``nbytes`` fit ``DEVICE_SHARE`` of the device's free memory (a CPU "device": always)."""
    free = _free_bytes(device)
    return free is None or nbytes <= DEVICE_SHARE * free


def sample_on_for(ctx: Any, device: torch.device, unable: Optional[str], csr: int) -> str:
    """This rank's choice: the checkpoint's where a resumed run has one, else :func:`sample_on_choice` (logged
    once where ``auto`` leaves a GPU worker on its CPU). Collective where ``auto`` meets accelerators in a job of
    2+ workers (every rank learns every rank's choice, which the checkpoint keeps)."""
    saved = ctx.decisions.get("sample_on")
    if saved is not None and len(saved) == ctx.world_size:
        return saved[ctx.rank]
    choice, why = sample_on_choice(ctx.cfg.sample_on, device, unable, csr)
    if choice == "cpu" and ctx.cfg.sample_on == "auto" and device.type == "cuda":
        logger.info("rank %d samples on the CPU: %s (--sample-on cpu to say so, device to insist)", ctx.rank, why)
    # Only auto on accelerators may decide differently from rank to rank; elsewhere every rank took the same choice.
    differ = ctx.world_size > 1 and ctx.cfg.sample_on == "auto" and any(not d.startswith("cpu") for d in ctx.cfg.devices)
    ctx.decisions["sample_on"] = comm.all_gather_object(choice) if differ else [choice] * ctx.world_size
    return choice


def device_sources(ctx: Any, part: Any, table: torch.Tensor, device: torch.device, replicate: str,
                   host: tuple[Any, Any], table_bytes: int, with_degrees: bool) -> tuple[Any, Any, Any]:
    """The device sampler, and the feature source and labels a batch sampled there reads: on the device where the
    CSR and the whole table fit (one worker, ``--replicate graph``), else ``host`` (the CPU path's source and labels).
    """
    from partition.api import load_structure
    from sampling import LocalFeatureSource
    from sampling.device import DeviceNeighborSampler, csr_bytes

    from graphdist.trainers.features import TableLabels, replicated_feature_table
    from graphdist.trainers.kit import sampler_seed

    cfg = ctx.cfg
    indptr, indices = load_structure(ctx.partitions)
    sampler = DeviceNeighborSampler(indptr, indices, cfg.fanouts, device, seed=sampler_seed(cfg.seed, ctx.rank))
    if replicate == "structure" or not fits(device, csr_bytes(indptr, indices) + table_bytes):
        logger.debug("rank %d: features stay in host memory, gathered into pinned buffers", ctx.rank)
        return sampler, host[0], host[1]
    if replicate == "graph":
        table = replicated_feature_table(ctx.partitions, cfg.feature_norm, with_degrees, part, table)
        labels = torch.cat([_labels(ctx.partitions.part(p, verify=False)) for p in range(ctx.partitions.num_parts)])
    else:
        labels = _labels(part)
    return sampler, LocalFeatureSource(table.to(device)), TableLabels(labels.to(device))


def _labels(part: Any) -> torch.Tensor:
    y = part.y
    return y if y.dim() == 2 else y.to(torch.int64)
