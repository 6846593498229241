"""``--sample-on``: where a worker samples its batches, its CPU or its device, decided once per rank and kept.

On the device (``sampling.device.DeviceNeighborSampler``) the worker's CSR and feature table live in
device memory, and batches never cross the host: the loader's thread samples and gathers on a side
stream and the step's stream waits for it (``sampling.staging``). That needs local sources, so one
worker, or ``--replicate graph`` (every worker holds the CSR and the features), neighbour-sampled
node batches, and room: the CSR and the table within ``DEVICE_SHARE`` of the device's free memory.
``auto`` picks the device on a CUDA worker where all of that holds and says in one line why not
where it does not; ``device`` refuses in one line where it cannot; ``cpu`` never.

A device's generator draws differently from the CPU's, so the choice is a decision
(``WorkerContext.decisions["sample_on"]``, one entry per rank): saved in the checkpoint and
reused on resume, so a resumed run samples where it did.

Example:
    >>> sample_on_choice("cpu", torch.device("cuda:0"), None, 0, 0)
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

__all__ = ["DEVICE_SHARE", "device_sources", "sample_on_choice", "sample_on_for"]


def _free_bytes(device: torch.device) -> Optional[int]:
    """Free memory of a CUDA device (None elsewhere: a CPU "device" is the host's memory)."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.mem_get_info(device)[0])


def sample_on_choice(setting: str, device: torch.device, unable: Optional[str], csr: int, table: int) -> tuple[str, str]:
    """``(cpu | device, why)`` for ``--sample-on setting`` on ``device``; ``unable`` says why batches cannot be
    sampled there (None: they can), ``csr`` and ``table`` are the bytes the device would hold.

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
    free = _free_bytes(device)
    need = csr + table
    if free is not None and need > DEVICE_SHARE * free:
        words = (f"the CSR and features ({need / 2**30:.2f} GiB) exceed {DEVICE_SHARE:.0%} of {device}'s free memory "
                 f"({free / 2**30:.2f} GiB)")
        if setting == "device":
            raise fail("sample-on", f"device: {words}", setting, "give {0}", ("sample_on", "cpu"))
        return "cpu", words
    return "device", f"the CSR and features ({need / 2**20:.0f} MiB) on {device}"


def sample_on_for(ctx: Any, device: torch.device, unable: Optional[str], csr: int, table: int) -> str:
    """This rank's choice: the checkpoint's where a resumed run has one, else :func:`sample_on_choice` (logged
    once where ``auto`` leaves a GPU worker on its CPU). Collective where the job has 2+ workers (every rank
    learns every rank's choice, which the checkpoint keeps)."""
    saved = ctx.decisions.get("sample_on")
    if saved is not None and len(saved) == ctx.world_size:
        return saved[ctx.rank]
    choice, why = sample_on_choice(ctx.cfg.sample_on, device, unable, csr, table)
    if choice == "cpu" and ctx.cfg.sample_on == "auto" and device.type == "cuda":
        logger.info("rank %d samples on the CPU: %s (--sample-on cpu to say so, device to insist)", ctx.rank, why)
    ctx.decisions["sample_on"] = comm.all_gather_object(choice) if ctx.world_size > 1 else [choice]
    return choice


def device_sources(ctx: Any, part: Any, table: torch.Tensor, device: torch.device, replicate: str,
                   feature_norm: str, with_degrees: bool) -> tuple[Any, Any, torch.Tensor]:
    """The device sampler, the device feature source and the labels by global id on the device.

    One worker holds the whole graph in its part (global ids are its local ids); ``--replicate graph``
    reads every part's rows.
    """
    from partition.api import load_structure
    from sampling import LocalFeatureSource
    from sampling.device import DeviceNeighborSampler

    from graphdist.trainers.features import replicated_feature_table
    from graphdist.trainers.kit import sampler_seed

    cfg = ctx.cfg
    indptr, indices = load_structure(ctx.partitions)
    if replicate == "graph":
        table = replicated_feature_table(ctx.partitions, feature_norm, with_degrees, part, table)
        parts = [ctx.partitions.part(p, verify=False) for p in range(ctx.partitions.num_parts)]
        labels = torch.cat([_labels(p) for p in parts])
    else:
        labels = _labels(part)
    sampler = DeviceNeighborSampler(indptr, indices, cfg.fanouts, device, seed=sampler_seed(cfg.seed, ctx.rank))
    return sampler, LocalFeatureSource(table.to(device)), labels.to(device)


def _labels(part: Any) -> torch.Tensor:
    y = part.y
    return y if y.dim() == 2 else y.to(torch.int64)
