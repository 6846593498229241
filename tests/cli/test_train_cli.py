"""graphdist-train's argument handling, in process (no workers)."""

from graphdist.cli.train import _resolve


def test_fanouts_accept_the_spaced_negative_form():
    # -1 (all neighbours) is documented; argparse alone takes "-1,-1" for a flag and fails.
    assert _resolve(["--fanouts", "-1,-1"]).fanouts == (-1, -1)
    assert _resolve(["--fanouts=-1,5"]).fanouts == (-1, 5)
    assert _resolve(["--fanouts", "10,5"]).fanouts == (10, 5)


def test_bad_values_name_the_variable_or_config_key(tmp_path, monkeypatch):
    import pytest

    monkeypatch.setenv("GRAPHDIST_EPOCHS", "abc")
    with pytest.raises(ValueError, match=r"^GRAPHDIST_EPOCHS must be an integer \(got 'abc'\)$"):
        _resolve([])
    monkeypatch.delenv("GRAPHDIST_EPOCHS")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("lr: fast\n")
    with pytest.raises(ValueError, match=r"--config .*c.yaml: lr must be a number \(got 'fast'\)"):
        _resolve(["--config", str(cfg)])


def test_bad_yaml_is_one_whole_line_and_near_miss_keys_get_a_suggestion(tmp_path):
    import pytest

    cfg = tmp_path / "c.yaml"
    cfg.write_text("epochs: 2\nlr: [0.1\n")
    with pytest.raises(ValueError) as err:
        _resolve(["--config", str(cfg)])
    assert "\n" not in str(err.value) and str(err.value).endswith("line 3, column 1: expected ',' or ']', but got "
                                                                  "'<stream end>')")
    cfg.write_text("epoch: 2\n")
    with pytest.raises(ValueError, match=r"unknown key 'epoch'; did you mean 'epochs'\?$"):
        _resolve(["--config", str(cfg)])


def test_help_documents_exit_codes_and_the_environment(capsys):
    import pytest

    from graphdist.cli.train import main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "exit codes:" in out and "2    refused before any worker started" in out and "130  interrupted" in out
    assert "GRAPHDIST_DATA" in out and "GRAPHDIST_<NAME>" in out


def test_a_device_per_worker_sets_the_worker_count():
    import pytest

    from graphdist.config import resolve

    assert resolve({"devices": "cpu,cpu,cpu,cpu"}, environ={}).num_workers == 4  # torchrun: before WORLD_SIZE
    assert resolve({"devices": "cpu"}, environ={}).num_workers == 2
    with pytest.raises(ValueError, match="--devices needs 1 entry or one per worker"):
        resolve({"devices": "cpu,cpu,cpu", "num_workers": 2}, environ={})


def test_overlapped_averaging_refuses_correction_steps():
    import pytest

    assert _resolve(["--strategy", "aggregation", "--avg-overlap"]).avg_overlap
    with pytest.raises(ValueError, match=r"--avg-overlap lands each average one step late, but --correction-steps 2"):
        _resolve(["--strategy", "aggregation", "--avg-overlap", "--correction-steps", "2"])
