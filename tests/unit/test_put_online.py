"""``upload.online.PutOnline`` on plain data: a fake clock and fake progress, no socket.

The fake destination carries ``per_lane`` bytes/s on each lane up to ``room`` lanes (a server whose
per-request work bounds each connection); beyond that the lanes share ``room × per_lane``, and each
request takes longer (the "RTT" the search is fed is the mean request time).
"""

from __future__ import annotations

from dtune.upload.online import PutOnline

MIB = 1 << 20
PART = 8 * MIB


def simulate(tuner: PutOnline, *, per_lane: float, room: int, seconds: float = 40.0,
             tick: float = 0.1) -> tuple[list[dict], list[int]]:
    """Run the fake put for ``seconds``; the search's steps and the lane counts seen."""
    now, acked = 0.0, 0.0
    steps: list[dict] = []
    seen: list[int] = []
    while now < seconds:
        params = tuner.params
        lanes = sum(v["cc"] * (v["p"] if name in tuner.in_parts else 1) for name, v in params.items())
        rate = min(lanes, room) * per_lane
        acked += rate * tick
        now += tick
        request_time = PART / (rate / lanes)
        moved = tuner.observe(now, int(acked), lanes, request_time, PART, bytes_left=10**12)
        if moved is not None:
            steps.append(moved[0])
        seen.append(lanes)
    return steps, seen


def new(cc: int = 1, p: int = 4, *, fixed_cc: int | None = None, fixed_p: int | None = None,
        in_parts: bool = True) -> PutOnline:
    return PutOnline({"large": {"cc": cc, "p": p}}, {"large"} if in_parts else set(),
                     fixed_cc=fixed_cc, fixed_p=fixed_p, cap=64, window=PART)


def test_climbs_when_more_lanes_add_rate():
    tuner = new()
    steps, seen = simulate(tuner, per_lane=4e6, room=64)
    assert steps and steps[0]["phase"] == "up" and steps[0]["from"] == 4
    assert max(seen) >= 16
    assert tuner.params["large"]["cc"] == 1          # files in parts: p grows, cc stays
    assert tuner.params["large"]["p"] > 4


def test_holds_when_more_lanes_add_nothing():
    tuner = new()
    steps, seen = simulate(tuner, per_lane=4e6, room=4, seconds=120)
    ups = [s for s in steps if s["to"] > s["from"]]
    backs = [s for s in steps if s["to"] < s["from"]]
    assert ups and len(backs) == len(ups)           # each probe up is undone
    assert all(s["to"] == 4 for s in backs)
    assert max(seen) <= 8
    assert tuner.search.phase == "hold" and tuner.params["large"] == {"cc": 1, "p": 4}
    later = seen[len(seen) // 2:]                   # the second minute: mostly the 4 that carry it
    assert sum(1 for n in later if n > 4) / len(later) < 0.35


def test_whole_files_scale_cc():
    tuner = new(cc=3, p=1, in_parts=False)
    simulate(tuner, per_lane=4e6, room=64)
    assert tuner.params["large"]["cc"] > 3
    assert tuner.params["large"]["p"] == 1


def test_a_fixed_p_scales_cc_and_a_fixed_cc_scales_p():
    tuner = new(cc=2, p=3, fixed_p=3)
    simulate(tuner, per_lane=4e6, room=64)
    assert tuner.params["large"]["p"] == 3 and tuner.params["large"]["cc"] > 2
    tuner = new(cc=2, p=3, fixed_cc=2)
    simulate(tuner, per_lane=4e6, room=64)
    assert tuner.params["large"]["cc"] == 2 and tuner.params["large"]["p"] > 3


def test_cc_and_p_both_fixed_search_nothing():
    tuner = new(cc=2, p=3, fixed_cc=2, fixed_p=3)
    assert not tuner.searching
    steps, seen = simulate(tuner, per_lane=4e6, room=64, seconds=5)
    assert steps == [] and set(seen) == {6}


def test_the_shape_is_what_the_search_judges():
    tuner = PutOnline({"small": {"cc": 4, "p": 1}, "large": {"cc": 1, "p": 4}}, {"large"},
                      fixed_cc=None, fixed_p=None, cap=64, window=PART)
    assert tuner.start == 8
    assert tuner.shape(16) == {"small": (8, 1), "large": (1, 8)}
    assert tuner.realize(16) == 16
    assert tuner.shape(2) == {"small": (1, 1), "large": (1, 1)}
