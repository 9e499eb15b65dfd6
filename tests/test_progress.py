"""Per-phase progress words with a time left (issue 14, item 10): worked out by hand on a fake clock."""

from __future__ import annotations

import pytest

from core.progress import PhaseClock, duration_words


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("seconds", "words"), [(0.2, "1 s"), (42, "42 s"), (59.4, "59 s"), (60, "1 min"),
                                                (359, "6 min"), (3600, "1 h"), (4800, "1 h 20 min")])
def test_duration_words(seconds, words):
    assert duration_words(seconds) == words


def test_a_phase_reports_its_share_and_the_time_left_at_its_own_pace():
    clock = FakeClock()
    phase = PhaseClock("caching views", clock=clock)
    assert phase.words(0, 400) == "caching views 0/400 (0% of this step)"  # the start: no pace yet
    clock.now += 1.0
    assert phase.words(2, 400) == "caching views 2/400 (0% of this step)"  # 1 s is too short to judge
    clock.now += 59.0  # 60 s for 120 items: 0.5 s each, 280 left -> 140 s
    assert phase.words(120, 400) == "caching views 120/400 (30% of this step, about 2 min left)"
    assert phase.seconds_left(120, 400) == pytest.approx(140.0)
    clock.now += 140.0
    assert phase.words(400, 400) == "caching views 400/400 (100% of this step)"  # done: nothing left to say


def test_set_up_before_the_first_item_is_not_counted_as_pace():
    clock = FakeClock()
    phase = PhaseClock("embedding", clock=clock)
    clock.now += 500.0  # a slow model load before the first report
    phase.seconds_left(10, 110)
    clock.now += 10.0
    assert phase.seconds_left(60, 110) == pytest.approx(10.0)  # 50 items in 10 s, 50 left


def test_a_phase_that_starts_over_resets_its_pace():
    clock = FakeClock()
    phase = PhaseClock("x", clock=clock)
    phase.seconds_left(0, 10)
    clock.now += 100.0
    phase.seconds_left(5, 10)
    assert phase.seconds_left(1, 10) is None  # fewer done than before: a new pass, a new start
    clock.now += 4.0
    assert phase.seconds_left(3, 10) == pytest.approx(14.0)  # 2 items in 4 s, 7 left
