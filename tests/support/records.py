"""A small threaded HTTP/1.1 server on 127.0.0.1 that plays a DOI resolver and the public APIs of
Zenodo, figshare and Dataverse (their documented JSON shapes), and serves the files they list.

    with RecordsServer() as srv:
        srv.route("/api/records/7", json_body({...}))          # exact path (and query)
        srv.file("/api/records/7/files/a.bin/content", b"...")  # GET (one Range honoured) and HEAD
        srv.redirect("/10.5281/zenodo.7", srv.url("/records/7"))
        srv.limit("/api/records/7", times=1, retry_after=1)     # 429 with Retry-After first

``srv.hits`` counts requests per path (with query). Everything stops at the end of the ``with``.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    ranges: bool = False   # honour one Range (a file)


def json_body(doc: object) -> Answer:
    return Answer(200, json.dumps(doc).encode(), {"Content-Type": "application/json"})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 -- (the stdlib's name)
        pass

    def do_HEAD(self) -> None:  # noqa: N802 -- (the stdlib's name)
        self._answer(head=True)

    def do_GET(self) -> None:  # noqa: N802 -- (the stdlib's name)
        self._answer(head=False)

    def _answer(self, *, head: bool) -> None:
        owner = self.server.owner
        with owner.lock:
            owner.hits[self.path] += 1
            owner.methods.append((self.command, self.path, self.headers.get("Authorization")))
            left = owner.limits.get(self.path, (0, 0))
            if left[0] > 0:
                owner.limits[self.path] = (left[0] - 1, left[1])
                answer = Answer(429, b"slow down", {"Retry-After": str(left[1])})
            else:
                answer = owner.routes.get(self.path, Answer(404, b"not found"))
                if owner.needs_token.get(self.path) and self.headers.get("Authorization") != owner.needs_token[self.path]:
                    answer = Answer(403, b"restricted")
        body, status, headers = answer.body, answer.status, dict(answer.headers)
        wanted = self.headers.get("Range", "")
        if answer.ranges and status == 200 and wanted.startswith("bytes=") and "," not in wanted:
            first, _, last = wanted[6:].partition("-")
            try:
                start = int(first)
                end = min(int(last), len(body) - 1) if last else len(body) - 1
            except ValueError:
                start, end = 0, -1
            if 0 <= start <= end:
                headers["Content-Range"] = f"bytes {start}-{end}/{len(body)}"
                body, status = body[start:end + 1], 206
        if answer.ranges:
            headers["Accept-Ranges"] = "bytes"
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: RecordsServer


class RecordsServer:
    """See the module docstring."""

    def __init__(self) -> None:
        self.routes: dict[str, Answer] = {}
        self.limits: dict[str, tuple[int, int]] = {}
        self.needs_token: dict[str, str] = {}
        self.hits: Counter[str] = Counter()
        self.methods: list[tuple[str, str, str | None]] = []
        self.lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def origin(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def url(self, path: str) -> str:
        return self.origin + path

    def route(self, path: str, answer: Answer) -> None:
        self.routes[path] = answer

    def file(self, path: str, data: bytes, *, token: str | None = None) -> None:
        self.routes[path] = Answer(200, data, {"Content-Type": "application/octet-stream"}, ranges=True)
        if token is not None:
            self.needs_token[path] = token

    def redirect(self, path: str, location: str, status: int = 302) -> None:
        self.routes[path] = Answer(status, b"", {"Location": location})

    def limit(self, path: str, *, times: int, retry_after: int) -> None:
        self.limits[path] = (times, retry_after)

    def __enter__(self) -> RecordsServer:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, name="dtune-records", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
