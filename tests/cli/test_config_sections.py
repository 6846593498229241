"""TrainConfig is composed of sections, each checked by the component it configures; flat names stay."""

from __future__ import annotations

from dataclasses import fields

import pytest

from graphdist.config import SECTIONS, TrainConfig, resolve, section_of
from graphdist.options import STRATEGIES, AggregationSection, FullGraphSection
from graphdist.section import ConfigError
from graphdist.sync.modes import SyncSection
from partition.edges import LinkSection
from placement.options import PlacementSection


def test_every_option_lives_in_exactly_one_section_under_its_flat_name():
    names = [name for section in SECTIONS.values() for name in section.names()]
    assert len(names) == len(set(names)), "an option in two sections"
    assert names == [f.name for f in fields(TrainConfig)]  # config.yaml lists them in section order
    assert set(TrainConfig().to_dict()) == set(names)
    assert section_of("compress") == "sync" and section_of("avg_every") == "aggregation"


@pytest.mark.parametrize("section, values, flag", [
    (SyncSection, {"sync": "ddp", "compress": "int8"}, "--compress"),
    (SyncSection, {"sacp_override": "layers.0=fast"}, "--sacp-override"),
    (FullGraphSection, {"staleness": 2}, "--staleness"),
    (FullGraphSection, {"staleness": 1, "boundary_sample": 0.5}, "--boundary-sample"),
    (AggregationSection, {"avg_overlap": True, "correction_steps": 2}, "--avg-overlap"),
    (PlacementSection, {"rebalance_eps": 0.0}, "--rebalance-eps"),
    (LinkSection, {"edge_split": (0.9, 0.1, 0.0)}, "--edge-split"),
])
def test_a_section_refuses_on_its_own_and_inside_the_config(section, values, flag):
    with pytest.raises(ConfigError) as alone:
        section(**values)
    with pytest.raises(ConfigError) as whole:
        TrainConfig(**values)
    assert str(alone.value).startswith(flag) and str(whole.value) == str(alone.value)


def test_a_component_reads_its_own_view():
    cfg = resolve({"strategy": "fullgraph", "staleness": 1}, environ={"GRAPHDIST_SMOOTHING": "0.5"})
    view = FullGraphSection.of(cfg)
    assert (view.staleness, view.smoothing) == (1, 0.5)
    assert FullGraphSection.of(cfg.to_dict()) == view


def test_a_strategy_reads_its_own_section():
    for spec in STRATEGIES.values():
        if spec.section is not None:
            assert set(spec.section.names()) <= spec.reads
    assert STRATEGIES["fullgraph"].section is FullGraphSection


def test_rules_across_sections_stay_in_the_config():
    # Fan-outs are checked against the depth only where the strategy samples.
    with pytest.raises(ConfigError, match="--fanouts has 2 entries but --layers is 3"):
        TrainConfig(layers=3, fanouts=(10, 5))
    assert TrainConfig(strategy="fullgraph", layers=3, fanouts=(10, 5)).layers == 3
