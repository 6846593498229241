"""graphdist-train's argument handling, in process (no workers)."""

from graphdist.cli.train import _resolve


def test_fanouts_accept_the_spaced_negative_form():
    # -1 (all neighbours) is documented; argparse alone takes "-1,-1" for a flag and fails.
    assert _resolve(["--fanouts", "-1,-1"]).fanouts == (-1, -1)
    assert _resolve(["--fanouts=-1,5"]).fanouts == (-1, 5)
    assert _resolve(["--fanouts", "10,5"]).fanouts == (10, 5)
