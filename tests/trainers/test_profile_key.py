"""A cached placement profile is reused only for the configuration it was measured under."""

from graphdist.config import TrainConfig
from graphdist.trainers.profile import PROFILE_NAME, Profile, _read_cached, profile_key


def _write(run_dir, key):
    profile = Profile(key=key, costs=[(0.001, 1e-5)] * 2, shares=[256, 256])
    (run_dir / PROFILE_NAME).write_text(profile.to_json())


def test_a_profile_measured_under_other_precision_or_sync_is_measured_again(tmp_path):
    cfg = TrainConfig(partitions=str(tmp_path))
    key = profile_key(cfg, 2, [256, 256])
    _write(tmp_path, key)
    assert _read_cached(tmp_path, key) is not None
    for field, value in (("precision", "bf16"), ("compress", "int8"), ("sync", "blocking"), ("sacp", "off")):
        other = profile_key(TrainConfig(partitions=str(tmp_path), **{field: value}), 2, [256, 256])
        assert _read_cached(tmp_path, other) is None, field  # its steps cost something else


def test_a_profile_written_before_the_sync_and_precision_fields_still_matches_the_defaults(tmp_path):
    # Such a profile was measured under the defaults of its day: --sync dwbp (--sync auto, today's
    # default, may train with ddp, whose steps cost otherwise: it is measured again).
    cfg = TrainConfig(partitions=str(tmp_path), sync="dwbp")
    key = profile_key(cfg, 2, [256, 256])
    old = {k: v for k, v in key.items() if k not in ("sync", "compress", "sacp", "precision")}
    _write(tmp_path, old)
    assert _read_cached(tmp_path, key) is not None
    assert _read_cached(tmp_path, profile_key(TrainConfig(partitions=str(tmp_path)), 2, [256, 256])) is None
    bf16 = profile_key(TrainConfig(partitions=str(tmp_path), sync="dwbp", precision="bf16"), 2, [256, 256])
    assert _read_cached(tmp_path, bf16) is None
