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
