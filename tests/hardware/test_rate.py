"""RateLoop: fixed deadlines, missed deadlines counted (not made up in a burst), no sleep off real time."""

import time

import pytest

from robot_rl.hardware.rate import RateLoop


def test_keeps_the_rate_and_counts_a_missed_deadline():
    loop = RateLoop(50.0)  # 20 ms period
    start = time.monotonic()
    for k in range(10):
        if k == 5:
            time.sleep(0.05)  # work that overruns: 2.5 periods
        loop.wait()
    elapsed = time.monotonic() - start
    stats = loop.stats()
    assert stats["misses"] >= 1 and stats["steps"] == 10  # the overrun (and any late wake on a busy CPU)
    # 9 on-time periods plus the 50 ms overrun; a burst catching up would be ~0.2 s instead (no upper
    # bound: a loaded machine wakes late, which the jitter figures show)
    assert elapsed >= 0.22, elapsed
    assert stats["jitter_p99_ms"] >= 20.0 and stats["jitter_p50_ms"] < stats["jitter_p99_ms"]


def test_no_sleep_when_not_realtime_and_bad_rates():
    loop = RateLoop(1.0, realtime=False)
    start = time.monotonic()
    for _ in range(100):
        loop.wait()
        loop.record_latency(0.001)
    assert time.monotonic() - start < 0.5
    stats = loop.stats()
    assert stats["misses"] == 0 and stats["hz_achieved"] > 100
    assert stats["latency_p50_ms"] == pytest.approx(1.0)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="control rate"):
            RateLoop(bad)
