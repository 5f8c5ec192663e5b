"""The bench's BitTorrent tracker: announce parsing, peer lists, malformed queries (pure, then one real socket)."""

from __future__ import annotations

import threading
import urllib.request
from urllib.parse import quote_from_bytes

import pytest
from dtune_lab.bench.bencode import bdecode
from dtune_lab.bench.tracker import (
    MAX_QUERY,
    Announce,
    AnnounceError,
    Swarms,
    compact_peers,
    parse_announce,
    respond,
)
from hypothesis import given, settings
from hypothesis import strategies as st

H1, H2 = bytes(range(20)), b"\xff" * 20


def query(info: bytes = H1, peer: bytes = b"-AR1360-abcdefghijkl", port: int | str = 6881, left: int | str = 0,
          **extra: str) -> str:
    parts = {"info_hash": quote_from_bytes(info), "peer_id": quote_from_bytes(peer), "port": str(port),
             "left": str(left), "uploaded": "0", "downloaded": "0", "compact": "1", **extra}
    return "&".join(f"{k}={v}" for k, v in parts.items())


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_parse_reads_binary_hash_and_peer_id_and_numbers() -> None:
    ann = parse_announce(query(left=12345, event="started", numwant="5"))
    assert ann == Announce(info_hash=H1, peer_id=b"-AR1360-abcdefghijkl", port=6881, left=12345,
                           event="started", numwant=5, compact=True)
    # aria2c leaves unreserved characters as they are: "_" and "C" are bytes 0x5f and 0x43
    assert parse_announce(query(info=b"C_" + b"\x00" * 18)).info_hash == b"C_" + b"\x00" * 18


@pytest.mark.parametrize("q, reason", [
    ("", "missing info_hash"),
    ("info_hash=abc&peer_id=x&port=1", "info_hash must be 20 bytes"),
    (query(peer=b""), "missing peer_id"),
    (query(peer=b"x" * 65), "peer_id longer"),
    (query(port=0), "port must be in 1..65535"),
    (query(port=70000), "port must be in 1..65535"),
    (query(port="-1"), "port must be a non-negative integer"),
    (query(port="6881x"), "port must be a non-negative integer"),
    (query(left="1e9"), "left must be a non-negative integer"),
    (query(event="exploded"), "unknown event"),
    (query(compact="yes"), "compact must be 0 or 1"),
    (query(numwant="9999"), "numwant must be in"),
    (query(uploaded="lots"), "uploaded must be"),
    ("a" * (MAX_QUERY + 1), "query longer"),
])
def test_malformed_announces_say_why(q: str, reason: str) -> None:
    with pytest.raises(AnnounceError, match=reason):
        parse_announce(q)


def test_respond_answers_every_bad_request_with_a_bencoded_failure() -> None:
    swarms = Swarms()
    for target in ["/announce", "/announce?%zz=%", "/announce?info_hash=%", "/announce?&&&=&=",
                   "/announce?" + query(port="x"), "/announce?" + "\udcff" * 10]:
        status, body = respond(target, "10.0.0.1", swarms)
        assert status == 200 and b"failure reason" in bdecode(body)
    status, body = respond("/scrape?" + query(), "10.0.0.1", swarms)
    assert status == 404 and bdecode(body)[b"failure reason"].startswith(b"not found")


def test_a_leecher_learns_every_seed_compact_and_a_seed_only_leechers() -> None:
    swarms = Swarms(interval=30)
    for i, ip in enumerate(["10.77.0.2", "10.77.1.2"]):
        resp = swarms.announce(parse_announce(query(peer=b"seed%016d" % i, event="started")), ip)
        assert resp["peers"] == b""  # a seed is told of no other seed
    resp = swarms.announce(parse_announce(query(peer=b"leech-0000000000000", left=100, event="started")),
                           "10.77.0.1")
    assert resp["interval"] == 30 and (resp["complete"], resp["incomplete"]) == (2, 1)
    assert resp["peers"] == bytes([10, 77, 0, 2, 0x1a, 0xe1, 10, 77, 1, 2, 0x1a, 0xe1])
    # now a seed learns of the leecher
    resp = swarms.announce(parse_announce(query(peer=b"seed%016d" % 0)), "10.77.0.2")
    assert resp["peers"] == bytes([10, 77, 0, 1, 0x1a, 0xe1])


def test_torrents_are_separate_and_stopped_or_silent_peers_leave() -> None:
    clock = Clock()
    swarms = Swarms(interval=10, clock=clock)
    swarms.announce(parse_announce(query(info=H1, peer=b"a" * 20)), "10.0.0.1")
    swarms.announce(parse_announce(query(info=H2, peer=b"b" * 20)), "10.0.0.2")
    leech = parse_announce(query(info=H1, peer=b"c" * 20, left=1))
    assert swarms.announce(leech, "10.0.0.3")["peers"] == bytes([10, 0, 0, 1, 0x1a, 0xe1])
    swarms.announce(parse_announce(query(info=H1, peer=b"a" * 20, event="stopped")), "10.0.0.1")
    assert swarms.announce(leech, "10.0.0.3")["peers"] == b""
    swarms.announce(parse_announce(query(info=H1, peer=b"d" * 20)), "10.0.0.4")
    clock.now = 21.0  # more than two intervals without an announce: gone
    assert swarms.announce(leech, "10.0.0.3")["complete"] == 0


def test_numwant_and_non_compact_and_ipv6_peers() -> None:
    swarms = Swarms()
    swarms.announce(parse_announce(query(peer=b"s4" * 10)), "10.0.0.1")
    swarms.announce(parse_announce(query(peer=b"s6" * 10, port=7000)), "fd00::2")
    resp = swarms.announce(parse_announce(query(peer=b"le" * 10, left=1, compact="0")), "10.0.0.9")
    assert resp["peers"] == [{"ip": "10.0.0.1", "port": 6881}, {"ip": "fd00::2", "port": 7000}]
    resp = swarms.announce(parse_announce(query(peer=b"le" * 10, left=1)), "10.0.0.9")
    assert resp["peers"] == bytes([10, 0, 0, 1, 0x1a, 0xe1]) and len(resp["peers6"]) == 18
    assert swarms.announce(parse_announce(query(peer=b"le" * 10, left=1, numwant="0")), "10.0.0.9")["peers"] == b""


def test_limits_keep_a_stray_client_from_filling_memory() -> None:
    swarms = Swarms(max_torrents=1, max_peers=2)
    swarms.announce(parse_announce(query(peer=b"a" * 20)), "10.0.0.1")
    swarms.announce(parse_announce(query(peer=b"b" * 20)), "10.0.0.2")
    with pytest.raises(AnnounceError, match="too many peers"):
        swarms.announce(parse_announce(query(peer=b"c" * 20)), "10.0.0.3")
    swarms.announce(parse_announce(query(peer=b"a" * 20)), "10.0.0.1")  # a known peer may re-announce
    with pytest.raises(AnnounceError, match="too many torrents"):
        swarms.announce(parse_announce(query(info=H2)), "10.0.0.4")


def test_compact_peers_packs_address_and_port_big_endian() -> None:
    from dtune_lab.bench.tracker import PeerEntry
    v4, v6 = compact_peers([PeerEntry("1.2.3.4", 258, True, 0.0), PeerEntry("::1", 1, True, 0.0)])
    assert v4 == b"\x01\x02\x03\x04\x01\x02" and v6 == b"\x00" * 15 + b"\x01\x00\x01"


def test_the_server_answers_over_a_real_socket_and_survives_garbage() -> None:
    """One real tracker on loopback: raw garbage, a bad announce, then a good one, each answered."""
    import socket

    from dtune_lab.bench.tracker import make_server

    events: list[dict[str, object]] = []
    httpd = make_server("127.0.0.1", 0, Swarms(), events.append)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    port = httpd.server_address[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"\x00\xff garbage \r\n\r\n")
            assert b"400" in s.recv(4096)  # http.server's own answer: bad request
        bad = urllib.request.urlopen(f"http://127.0.0.1:{port}/announce?port=1", timeout=5).read()
        assert bdecode(bad) == {b"failure reason": b"missing info_hash"}
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/announce?{query(left=0)}", timeout=5).read()
        assert bdecode(body)[b"complete"] == 1
        assert events == [{"event": "announce", "info_hash": H1.hex(), "ip": "127.0.0.1", "port": 6881,
                           "left": 0, "kind": ""}]
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(5)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0xff), max_size=300))
def test_no_request_target_breaks_the_tracker(target: str) -> None:
    """http.server hands over ISO-8859-1 text; whatever it is, the answer is bencoded."""
    swarms = Swarms()
    for t in (target, "/announce?" + target, "/announce?" + query() + "&" + target):
        status, body = respond(t, "10.0.0.1", swarms)
        assert status in (200, 404) and isinstance(bdecode(body), dict)
