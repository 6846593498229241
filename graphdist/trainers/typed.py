"""What a run on a typed graph (node types and relations) may do, checked before any worker starts.

A typed graph trains with ``--strategy minibatch`` (every sync option, node classification on its
target type), sampling each relation with its own fan-out; ``--model rgcn`` and ``rsage`` need one,
and every other model trains on its homogeneous view. What is not built for typed graphs is refused
here in one line rather than trained wrongly (docs/hetero.md lists it).

Example:
    >>> from graphdist.config import TrainConfig
    >>> check_typed_run(TrainConfig(model="rgcn"), {"dataset": "cora"})
    Traceback (most recent call last):
    ...
    ValueError: --model rgcn needs a typed graph (node types and relations); cora has one type: train --model sage, gcn or gat on it, or give a typed dataset (typed-cora, synthetic-hetero-<N>, a typed .npz)
"""

from __future__ import annotations

from typing import Any, Optional

from graphdist.models.registry import MODELS, parse_relation_fanouts

__all__ = ["check_typed_run", "relation_overrides", "schema_of", "typed_prediction_keys"]


def schema_of(meta: dict[str, Any]) -> Optional[Any]:
    """The typed graph's ``Schema`` over a partition directory's ids, or None (an untyped graph)."""
    from partition.format import partition_schema

    return partition_schema(meta)


def relation_overrides(cfg: Any) -> Optional[dict[str, tuple[int, ...]]]:
    """``--relation-fanouts`` as the sampler takes it (None when not given)."""
    return parse_relation_fanouts(cfg.relation_fanouts) or None


def check_typed_run(cfg: Any, meta: dict[str, Any]) -> None:
    """Refuses a typed model on an untyped graph, and on a typed graph what is not built for one.

    Raises:
        ValueError: one line naming the option and what to do instead.
    """
    typed_model = MODELS[cfg.model].typed
    if "schema" not in meta:
        if typed_model:
            others = ", ".join(m for m, e in MODELS.items() if not e.typed and m != "graphsage")
            raise ValueError(f"--model {cfg.model} needs a typed graph (node types and relations); "
                             f"{meta.get('dataset', 'the dataset')} has one type: train --model {others.replace(', gat', ' or gat')} "
                             "on it, or give a typed dataset (typed-cora, synthetic-hetero-<N>, a typed .npz)")
        if cfg.relation_fanouts:
            raise ValueError(f"--relation-fanouts applies to typed graphs; {meta.get('dataset', 'the dataset')} has one "
                             "node type and one relation: use --fanouts")
        return
    unbuilt = [("strategy", cfg.strategy, "minibatch"), ("task", cfg.task, "node"), ("sampler", cfg.sampler, "neighbor")]
    for flag, value, supported in unbuilt:
        if value != supported:
            raise ValueError(f"--{flag} {value} is not built for typed graphs (node types and relations); "
                             f"train {meta.get('dataset', 'it')} with --{flag} {supported}")
    if cfg.sample_on == "device":
        raise ValueError("--sample-on device is not built for typed graphs: they sample on the CPU (--sample-on auto)")
    schema = schema_of(meta)
    from sampling.typed import relation_fanouts

    relation_fanouts(schema, cfg.fanouts, relation_overrides(cfg))  # an unknown relation is named here


def typed_prediction_keys(meta: dict[str, Any], orig_ids: Any) -> dict[str, Any]:
    """``--predict``'s keys of a typed graph's nodes: ``node_types`` (names), ``node_type`` (an index into them)
    and ``type_id`` (the id within the type) of every original id; nothing for an untyped graph."""
    if "schema" not in meta:
        return {}
    import numpy as np
    import torch

    from graphdist.data.schema import Schema

    schema = Schema.from_dict({**meta["schema"], "ranges": None})  # the original ids' layout
    ids = torch.from_numpy(np.asarray(orig_ids))
    return {"node_types": np.array(schema.node_types), "node_type": schema.node_type(ids).numpy().astype(np.int16),
            "type_id": schema.type_index(ids).numpy()}
