"""The conductor: per-node caps from the aggregate rate of a cluster transfer (pure, plain data)."""

from __future__ import annotations

import pytest

from dtune.cluster.conduct import ConductConstants, Conductor, split_caps

MBIT = 1e6 / 8
NODES = ["tcp://n1:1", "tcp://n2:1", "tcp://n3:1"]


class Feed:
    """Nodes reporting once a second (their shard's own clock, bytes so far, connections); the
    parent's conductor ticked every 0.1 s. Every move it makes is kept."""

    def __init__(self, conductor: Conductor) -> None:
        self.c = conductor
        self.t = 0.0
        self.sent = dict.fromkeys(NODES, 0.0)
        self.moves = []

    def run(self, seconds: float, rates: dict[str, float], conns: dict[str, int] | None = None, *,
            follow: bool = True) -> None:
        """``rates`` in Mbit/s per node (absent: idle); ``conns`` per node, held within the caps in
        force when ``follow`` (the nodes obey them)."""
        end = self.t + seconds
        while self.t < end - 1e-9:
            self.t = round(self.t + 0.1, 3)
            if abs(self.t - round(self.t)) < 1e-9:
                for node, rate in rates.items():
                    self.sent[node] += rate * MBIT
                    n = (conns or {}).get(node, 8)
                    if follow and self.c.caps is not None:
                        n = min(n, self.c.caps[node])
                    self.c.report(self.t, node, 0, self.t, int(self.sent[node]), n)
            move = self.c.tick(self.t)
            if move is not None:
                self.moves.append((self.t, move))


def test_nodes_that_add_connections_the_aggregate_does_not_reward_are_capped():
    feed = Feed(Conductor(NODES, share=21))
    feed.run(8, dict.fromkeys(NODES, 100.0), dict.fromkeys(NODES, 3))      # 9 connections: 300 Mbit/s
    assert feed.moves == []
    feed.run(10, dict.fromkeys(NODES, 100.0), dict.fromkeys(NODES, 15))    # 45: still 300
    assert len(feed.moves) == 1
    t, move = feed.moves[0]
    assert sum(move.caps.values()) == 12 and set(move.caps.values()) == {4}   # 1.25 × 9, by rate
    assert move.event["fewest"] == 9 and move.event["connections"] == 45
    assert "45 connections on 3 nodes give 300 Mbit/s; 9 gave 300 Mbit/s: capped at 12" in move.reason
    assert t <= 8 + 2 * 2 + 2 + 0.1                                      # two windows of 2 s to confirm
    feed.run(20, dict.fromkeys(NODES, 100.0), dict.fromkeys(NODES, 15))    # held: no more moves
    assert len(feed.moves) == 1


def test_caps_follow_the_nodes_rates_within_their_share():
    assert split_caps(12, {"a": 200.0, "b": 100.0, "c": 100.0}, share=21) == {"a": 6, "b": 3, "c": 3}
    assert split_caps(12, {"a": 1000.0, "b": 1.0, "c": 1.0}, share=5) == {"a": 5, "b": 2, "c": 2}  # (a full)
    assert split_caps(3, {"a": 0.0, "b": 0.0, "c": 0.0}, share=8) == {"a": 1, "b": 1, "c": 1}
    assert split_caps(7, {"a": 1.0, "b": 1.0}, share=8) in ({"a": 4, "b": 3}, {"a": 3, "b": 4})
    assert split_caps(5, {}, share=3) == {}


def test_nodes_each_limited_by_their_own_link_are_never_capped():
    feed = Feed(Conductor(NODES, share=21))
    feed.run(8, dict.fromkeys(NODES, 60.0), dict.fromkeys(NODES, 3))
    feed.run(10, dict.fromkeys(NODES, 190.0), dict.fromkeys(NODES, 15))    # more connections, more rate
    feed.run(10, dict.fromkeys(NODES, 195.0), dict.fromkeys(NODES, 16))
    assert feed.moves == []


def test_caps_that_cost_the_aggregate_are_lifted_and_not_tried_again_on_that_path():
    feed = Feed(Conductor(NODES, share=21))
    feed.run(8, dict.fromkeys(NODES, 100.0), dict.fromkeys(NODES, 3))
    feed.run(10, dict.fromkeys(NODES, 100.0), dict.fromkeys(NODES, 15))
    assert len(feed.moves) == 1
    feed.run(10, dict.fromkeys(NODES, 80.0), dict.fromkeys(NODES, 15))     # capped: 240 of 300 (-20 %)
    assert len(feed.moves) == 2
    lifted = feed.moves[1][1]
    assert lifted.event == {"lifted": True} and set(lifted.caps.values()) == {21}
    assert "caps cost the aggregate" in lifted.reason
    feed.run(30, dict.fromkeys(NODES, 100.0), dict.fromkeys(NODES, 15))    # excess again: disarmed
    assert len(feed.moves) == 2


def test_a_new_path_forgets_what_was_learnt_and_lifts_the_caps():
    feed = Feed(Conductor(NODES, share=21))
    feed.run(8, dict.fromkeys(NODES, 100.0), dict.fromkeys(NODES, 3))
    feed.run(10, dict.fromkeys(NODES, 100.0), dict.fromkeys(NODES, 15))
    assert len(feed.moves) == 1
    feed.run(10, dict.fromkeys(NODES, 200.0), dict.fromkeys(NODES, 15))    # the bottleneck widened
    assert len(feed.moves) == 2 and "a new path" in feed.moves[1][1].reason
    assert feed.moves[1][1].event == {"lifted": True} and feed.c.armed and feed.c.caps is None


def test_one_node_alone_has_no_one_to_fight_and_is_never_capped():
    feed = Feed(Conductor(NODES, share=21))
    one = {NODES[0]: 100.0}
    feed.run(8, one, {NODES[0]: 3})
    feed.run(12, one, {NODES[0]: 20})
    assert feed.moves == []


def test_a_shard_that_starts_again_is_not_read_as_bytes_going_backwards():
    c = Conductor(NODES[:2], share=8, constants=ConductConstants(window=1.0))
    c.report(1.0, NODES[0], 0, 1.0, 10_000_000, 4)
    c.report(2.0, NODES[0], 0, 2.0, 20_000_000, 4)
    c.report(2.5, NODES[0], 1, 0.5, 1_000_000, 4)          # the node's next shard: its own clock
    c.report(3.0, NODES[0], 1, 1.0, 3_000_000, 4)
    c.report(3.0, NODES[0], 0, 1.5, 5, 4)                   # garbage for a finished shard: ignored
    state = c.nodes[NODES[0]]
    assert state.moved == pytest.approx(12_000_000) and state.seconds == pytest.approx(1.5)


class SharedLink:
    """Three nodes behind one link: each wants ``want`` connections (their own searches, within
    the caps); the aggregate is ``rate(C)`` Mbit/s, shared by connections; the RTT grows with the
    queue that connections beyond ``fill`` keep at the bottleneck."""

    def __init__(self, conductor: Conductor, rate, fill: int, want: int = 15) -> None:  # noqa: ANN001
        self.c, self.rate, self.fill, self.want = conductor, rate, fill, want
        self.t = 0.0
        self.sent = dict.fromkeys(NODES, 0.0)
        self.moves = []

    def conns(self) -> dict[str, int]:
        return {n: min(self.want, self.c.caps[n]) if self.c.caps else self.want for n in NODES}

    def run(self, seconds: float) -> None:
        end = self.t + seconds
        while self.t < end - 1e-9:
            self.t = round(self.t + 0.1, 3)
            if abs(self.t - round(self.t)) < 1e-9:
                conns = self.conns()
                total = sum(conns.values())
                rtt = 0.040 + 0.008 * max(0, total - self.fill)
                for node in NODES:
                    self.sent[node] += self.rate(total) * MBIT * conns[node] / total
                    self.c.report(self.t, node, 0, self.t, int(self.sent[node]), conns[node], rtt, 0.040)
            move = self.c.tick(self.t)
            if move is not None:
                self.moves.append((self.t, move))


def test_a_queue_at_a_shared_bottleneck_is_probed_down_while_the_aggregate_holds():
    link = SharedLink(Conductor(NODES, share=21), rate=lambda c: 300.0 if c >= 6 else 50.0 * c, fill=6)
    link.run(60)
    totals = [m.event.get("total") for _, m in link.moves]
    assert totals[:3] == [31, 21, 14] and all(m.event["rule"] == "queue" for _, m in link.moves)
    assert "45 connections on 3 nodes give 300 Mbit/s with the RTT at 352 ms over 40 ms" in link.moves[0][1].reason
    assert sum(link.conns().values()) <= 9 and link.c.phase in ("hold", "probe")
    assert all(m.event.get("back") is None for _, m in link.moves)


def test_a_probe_that_costs_the_aggregate_goes_back_to_the_last_total_that_held_and_stops():
    # the queue stays (fill 2), but fewer than 18 connections no longer fill the link
    link = SharedLink(Conductor(NODES, share=21), rate=lambda c: 300.0 if c >= 18 else 15.0 * c, fill=2)
    link.run(80)
    last = link.moves[-1][1]
    assert last.event.get("back") is True and last.event["total"] == 21     # 45 → 31 → 21 → 14: back
    assert "less than 0.95× 300 Mbit/s: back to 21 in all" in last.reason
    assert not link.c.armed and sum(link.conns().values()) == 21
    n = len(link.moves)
    link.run(40)
    assert len(link.moves) == n                                             # no more probes on this path


def test_a_first_probe_that_costs_the_aggregate_lifts_the_caps():
    link = SharedLink(Conductor(NODES, share=21), rate=lambda c: 300.0 if c >= 40 else 7.0 * c, fill=2)
    link.run(40)
    assert [m.event.get("total") for _, m in link.moves[:1]] == [31]
    assert link.moves[1][1].event == {"lifted": True} and link.c.caps is None and not link.c.armed


def test_nodes_whose_rtt_stays_at_the_paths_own_are_not_probed():
    link = SharedLink(Conductor(NODES, share=21), rate=lambda c: 300.0, fill=100)
    link.run(60)
    assert link.moves == []


def test_nodes_that_cannot_come_down_to_their_caps_are_not_probed_again_and_again():
    # each node's partitions hold at least 10 connections, whatever its cap
    link = SharedLink(Conductor(NODES, share=21), rate=lambda c: 300.0, fill=2)
    link.conns = lambda: {n: max(10, min(15, link.c.caps[n])) if link.c.caps else 15 for n in NODES}
    link.run(80)
    assert [m.event.get("total") for _, m in link.moves] == [31, 21]   # 45 → 31 (30 held) → 21: stuck
    assert link.c.least == 30 and link.c.phase == "hold" and link.c.caps is not None


def test_a_node_done_with_its_shards_leaves_its_part_of_the_total_to_those_at_work():
    link = SharedLink(Conductor(NODES, share=21), rate=lambda c: 300.0 if c >= 6 else 50.0 * c, fill=6)
    link.run(20)
    assert link.c.caps is not None
    at_work = {n: 100.0 for n in NODES[:2]}          # node 3 has finished: it reports no more
    feed = Feed(link.c)
    feed.t, feed.sent = link.t, dict(link.sent)
    feed.run(4, at_work, dict.fromkeys(NODES[:2], 4))
    reshared = [m for _, m in feed.moves if m.event.get("rule") == "reshare"]
    assert reshared and sum(reshared[0].caps[n] for n in NODES[:2]) == reshared[0].event["total"] >= 2
    assert "shared again over 2 nodes at work" in reshared[0].reason
    feed.run(4, {NODES[0]: 100.0}, {NODES[0]: 4})    # the last node alone: no one to share with
    assert feed.moves[-1][1].event == {"lifted": True} and link.c.caps is None
