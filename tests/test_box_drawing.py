import numpy as np
import pytest

from core.annotations import Box
from core.io.box_drawing import HIGHLIGHT_COLOUR, OTHER_COLOUR, draw_boxes


def test_draw_boxes_outlines_labels_and_highlight():
    rgb = np.zeros((200, 300, 3), np.uint8)
    boxes = [Box(0.1, 0.3, 0.3, 0.5), Box(0.6, 0.3, 0.3, 0.5)]
    out = draw_boxes(rgb, boxes, ["Aria", "#7"], highlight=1)
    assert out.shape == rgb.shape and out.dtype == np.uint8
    assert not rgb.any()  # input untouched
    # outlines: the left edge of each box is coloured, the inside stays black
    assert tuple(out[150, 30]) == OTHER_COLOUR
    assert tuple(out[150, 180]) == HIGHLIGHT_COLOUR
    assert not out[130, 75].any() and not out[130, 225].any()
    # the highlighted outline is thicker
    left = (out[150, 25:40] == OTHER_COLOUR).all(axis=1).sum()
    right = (out[150, 175:190] == HIGHLIGHT_COLOUR).all(axis=1).sum()
    assert right > left
    # a label was written above each box
    assert (out[40:60, 30:90] != 0).any() and (out[40:60, 180:240] != 0).any()


def test_draw_boxes_checks_labels():
    with pytest.raises(ValueError):
        draw_boxes(np.zeros((10, 10, 3), np.uint8), [Box(0, 0, 1, 1)], [])
