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


def test_mcnemar_exact_known_values_and_pairing():
    from robot_rl.eval.metrics import mcnemar_exact, paired_comparison

    assert mcnemar_exact(38, 17) == pytest.approx(0.0066, abs=5e-4)  # README: QC vs BC, p = 0.006
    assert mcnemar_exact(0, 7) == pytest.approx(2 / 128)  # issue 14: 0.82 vs 0.96 on 50 pairs, p = 0.016
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    with pytest.raises(ValueError, match=">= 0"):
        mcnemar_exact(-1, 2)
    a = [EpisodeResult(s, ok, 0.0, 10, None) for s, ok in [(1, True), (2, True), (3, False), (4, True)]]
    b = [EpisodeResult(s, ok, 0.0, 10, None) for s, ok in [(4, False), (3, True), (2, True), (1, False)]]
    out = paired_comparison(a, b)
    assert (out["num_pairs"], out["only_a"], out["only_b"]) == (4, 2, 1)
    with pytest.raises(ValueError, match="same env seeds"):
        paired_comparison(a, b[:3])
