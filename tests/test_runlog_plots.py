"""The run directory's figures: the per-rank time and bytes-per-purpose numbers, and which PNGs are drawn."""

from __future__ import annotations

import pytest

from graphdist.runlog import bytes_per_tag, plot_run, rank_time_totals


def _minibatch_history() -> list[dict]:
    """Two epochs of a 2-worker minibatch run, numbers chosen by hand."""
    return [
        {"epoch": 1, "loss": 1.2, "train_acc": 0.4, "val_acc": 0.5, "epoch_time_s": 10.0,
         "time_sample_s": 2.0, "time_compute_s": 6.0, "time_comm_s": 1.0,
         "compute_s": [6.0, 3.0], "sync_wait_s": [1.0, 2.0], "sample_wait_s": [2.0, 1.0],
         "busy_s": [8.0, 4.0], "idle_s": [2.0, 6.0],
         "bytes_sent": {"grad": 2 * 2**20, "sample": 2**20, "eval": 0}},
        {"epoch": 2, "loss": 0.9, "train_acc": 0.6, "val_acc": 0.7, "epoch_time_s": 5.0,
         "time_sample_s": 1.0, "time_compute_s": 3.0, "time_comm_s": 0.5,
         "compute_s": [3.0, 1.5], "sync_wait_s": [0.5, 1.0], "sample_wait_s": [1.0, 0.5],
         "busy_s": [4.0, 2.0], "idle_s": [1.0, 3.0],
         "bytes_sent": {"grad": 2 * 2**20, "feature": 4 * 2**20}},
    ]


def test_rank_time_totals_sum_each_rank_over_the_epochs():
    totals = rank_time_totals(_minibatch_history())
    assert totals == {"compute": [9.0, 4.5], "sync wait": [1.5, 3.0], "sample wait": [3.0, 1.5],
                      "other": [1.5, 6.0]}
    # Every rank's bar is the run's wall time: the epochs' times summed.
    assert [sum(part[r] for part in totals.values()) for r in (0, 1)] == [15.0, 15.0]


def test_rank_time_totals_never_negative_and_skip_records_without_lists():
    history = _minibatch_history()
    history[0]["compute_s"] = [9.5, 3.0]  # parts exceed the epoch (clock jitter): other is 0, not -2.5
    history.append({"epoch": 3, "epoch_time_s": 4.0, "bytes_sent": {}})  # a record without per-rank lists
    totals = rank_time_totals(history)
    assert totals["other"] == [0.5, 6.0]
    assert totals["compute"] == [12.5, 4.5]
    assert rank_time_totals([{"epoch": 1, "epoch_time_s": 3.0, "loss": 1.0}]) == {}  # fullgraph, aggregation


def test_bytes_per_tag_in_mib_per_epoch_most_first_empty_tags_dropped():
    per_tag = bytes_per_tag(_minibatch_history())
    assert per_tag == {"grad": [2.0, 2.0], "feature": [0.0, 4.0], "sample": [1.0, 0.0]}
    assert list(per_tag) == ["feature", "grad", "sample"]  # 4 MiB, 4 MiB (the name breaks the tie), 1 MiB
    assert bytes_per_tag([{"epoch": 1, "bytes_sent": {"grad": 0}}, {"epoch": 2}]) == {}


@pytest.mark.parametrize("strip, expected", [
    ((), {"loss_acc.png", "time_breakdown.png", "breakdown.png"}),
    (("compute_s", "sync_wait_s", "sample_wait_s", "busy_s", "idle_s"),  # other strategies: bytes panel only
     {"loss_acc.png", "time_breakdown.png", "breakdown.png"}),
    (("compute_s", "sync_wait_s", "sample_wait_s", "busy_s", "idle_s", "bytes_sent"),  # neither panel: no file
     {"loss_acc.png", "time_breakdown.png"}),
])
def test_plot_run_draws_breakdown_only_from_numbers_it_has(tmp_path, strip, expected):
    history = [{k: v for k, v in r.items() if k not in strip} for r in _minibatch_history()]
    paths = plot_run(tmp_path, history, title="synthetic | sage | minibatch | 2 workers")
    assert {p.name for p in paths} == expected
    assert {p.name for p in tmp_path.glob("*.png")} == expected
    assert all(p.stat().st_size > 1000 for p in paths)  # a real image, not an empty file
