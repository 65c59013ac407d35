#!/usr/bin/env python3
"""Checks of scenes.py's truth in words (run by scripts/test.sh): a place near a line between the
frame's thirds is accepted on both sides, and nothing else changes what the truth says.

    .venv/bin/python engines/scenes/test_scenes.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scenes  # noqa: E402

W, H = scenes.WIDTH, scenes.HEIGHT


def test_regions() -> None:
    m = scenes.PLACE_MARGIN_PX
    # Far from every line: one place.
    assert scenes.regions(20.0, 15.0) == ["at the top left"]
    assert scenes.regions(W / 2, H / 2) == ["in the centre"]
    # Just inside the left third, half the margin from its line: both sides, its own first.
    assert scenes.regions(W / 3 - m / 2, H / 2) == ["on the left", "in the centre"]
    # Just past it: the same two, the other first.
    assert scenes.regions(W / 3 + m / 2, H / 2) == ["in the centre", "on the left"]
    # Past the margin: one place again.
    assert scenes.regions(W / 3 + 2 * m, H / 2) == ["in the centre"]
    # Near a corner where two lines cross: the four places around it.
    assert sorted(scenes.regions(2 * W / 3 + m / 4, H / 3 - m / 4)) == sorted(
        ["at the top", "at the top right", "in the centre", "on the right"])


def test_questions() -> None:
    """Over 400 held-out scenes: the truth's first answer is what it was (region() and narration()),
    a place with alternatives is near a line, and its alternatives are the places within the margin."""
    with_alternatives = places = 0
    for k in range(400):
        scene = scenes.make_scene("heldout", k, None)
        i = scene.frames - 1
        qs = scenes.questions(scene, np.random.default_rng(k))
        narrations = [q for q in qs if q["kind"] == "narration"]
        assert len(narrations) == 1
        assert narrations[0]["answer"] == scenes.narration(scene)
        assert narrations[0]["answer"] == scenes.narration_answers(scene)[0]
        assert len(set(scenes.narration_answers(scene))) == len(scenes.narration_answers(scene))
        for o in (o for o in scene.objects if o.visible(i)):
            q = next(q for q in qs if q["question"] == f"Where is the {o.name}?")
            x, y = o.path[i]
            assert q["answer"] == f"The {o.name} is {scenes.region(x, y)}."
            near = min(abs(x - W / 3), abs(x - 2 * W / 3), abs(y - H / 3), abs(y - 2 * H / 3))
            also = q.get("also", [])
            assert bool(also) == (near <= scenes.PLACE_MARGIN_PX), (x, y, also)
            with_alternatives += bool(also)
            places += 1
        for q in qs:
            if q["kind"] not in ("position", "narration"):
                assert "also" not in q, q
    # Some, and few: a few places in a hundred sit within a pixel of a line (margin 1 px on each
    # side of four lines across a 224x112 frame).
    assert 0.01 * places <= with_alternatives <= 0.08 * places, (with_alternatives, places)


if __name__ == "__main__":
    test_regions()
    test_questions()
    print("scenes: truth in words ok")
