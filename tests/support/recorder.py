"""An exchange that records what an ``http.connection.Connection`` told it, and response bytes.

``Recorder`` is what the engine's requests are to a ``Connection``: it gets
``on_headers`` / ``on_body`` / ``on_complete`` / ``on_error`` and keeps them
(and checks it is told only once how it ended); ``response`` builds the bytes
of one HTTP/1.1 response with a Content-Length.
"""

from __future__ import annotations

from dtune.http.message import Origin, build_request

ORIGIN = Origin("http", "127.0.0.1", 80)


class Recorder:
    """An exchange that records what the conn told it."""

    def __init__(self, target: str = "/", *, keep: bool = True) -> None:
        self.request = build_request("GET", ORIGIN, target)
        self.keep = keep
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.body_calls = 0
        self.outcome: str | None = None     # complete | error
        self.error: Exception | None = None
        self.calls: list[str] = []

    def on_headers(self, status: int, headers: dict[str, str]) -> bool:
        self.calls.append("headers")
        self.status, self.headers = status, headers
        return self.keep

    def on_body(self, data: bytes) -> None:
        self.calls.append("body")
        self.body += data
        self.body_calls += 1

    def on_complete(self) -> None:
        self.calls.append("complete")
        assert self.outcome is None, "told twice how it ended"
        self.outcome = "complete"

    def on_error(self, exc: Exception) -> None:
        self.calls.append("error")
        assert self.outcome is None, "told twice how it ended"
        self.outcome, self.error = "error", exc


def response(body: bytes, status: int = 200, *headers: str) -> bytes:
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body
