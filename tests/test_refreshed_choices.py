"""app.ui_base.refreshed_choices: a refresh never wipes a pick made while it was in flight (the race that failed
CI on the Diagnostics tab: the refresh started with the picker empty and came back after the curator's pick)."""

from __future__ import annotations

from app.ui_base import refreshed_choices


def test_a_refresh_started_with_no_pick_leaves_the_value_alone():
    update = refreshed_choices([("#1 · photo", 1), ("#2 · photo", 2)], None)
    assert update["choices"] == [("#1 · photo", 1), ("#2 · photo", 2)] and "value" not in update


def test_a_refresh_started_with_an_empty_box_leaves_the_value_alone():
    # a link from another tab fills the picker while the tab's refresh, started with the box empty, is in flight
    update = refreshed_choices([("#1 · photo", 1), ("#2 · photo", 2)], "")
    assert update["choices"] == [("#1 · photo", 1), ("#2 · photo", 2)] and "value" not in update


def test_a_pick_still_offered_is_kept_and_a_pick_gone_is_cleared():
    choices = [("#1", 1), ("#2", 2)]
    assert "value" not in refreshed_choices(choices, 2)
    gone = refreshed_choices(choices, 3)  # e.g. the photo was merged away or deleted meanwhile
    assert gone["value"] is None and gone["choices"] == choices


def test_plain_values_and_explicit_values():
    assert "value" not in refreshed_choices(["D1", "D2"], "D2")
    assert refreshed_choices(["D1", "D2"], "D3")["value"] is None
    labels = ["Ana (3 photos)", "Bia (1 photo)"]
    assert "value" not in refreshed_choices(labels, 7, values=[7, 9])
    assert refreshed_choices(labels, 8, values=[7, 9])["value"] is None
