"""Evaluation metrics against hand-computed values."""

import pytest

from robot_rl.eval.metrics import EpisodeResult, summarize, summarize_seeds, wilson_interval


def test_wilson_interval_known_values():
    lo, hi = wilson_interval(45, 50)  # p = 0.9, n = 50
    assert lo == pytest.approx(0.7864, abs=1e-3)
    assert hi == pytest.approx(0.9565, abs=1e-3)
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        wilson_interval(0, 0)


def test_summarize_cycle_time_only_over_successes():
    eps = [
        EpisodeResult(0, True, 1.0, 30, 3.0),
        EpisodeResult(1, False, 0.0, 60, None),
        EpisodeResult(2, True, 1.0, 20, 2.0),
    ]
    s = summarize(eps)
    assert s["success_rate"] == pytest.approx(2 / 3)
    assert s["cycle_time_s"] == pytest.approx(2.5)
    assert s["mean_return"] == pytest.approx(2 / 3)
    pooled = summarize_seeds({0: eps[:2], 1: eps[2:]})
    assert pooled["success_rate_per_seed"] == {"0": 0.5, "1": 1.0}
    assert pooled["success_rate_std_across_seeds"] == pytest.approx(0.25)
