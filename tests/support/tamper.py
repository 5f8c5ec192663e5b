"""A relay on 127.0.0.1 that damages request bodies on their way to a real server.

``TamperRelay(upstream_port, damage)`` forwards each HTTP/1.1 request (head,
then a ``Content-Length`` body) to the server on ``upstream_port`` and its
answer back, one upstream connection per client connection. ``damage(line,
body)`` returns the body to send on: a test flips a byte of S3 parts to see
that Content-MD5 and the ETag checks catch it. Answers are framed by
``Content-Length`` (a HEAD's carry none); an answer that says
``Connection: close`` ends the client connection. ``pace`` (bytes/s, 0:
none) paces each connection's request bodies, as a server whose per-request
work bounds each connection's rate. ``stop()`` closes the
listening socket; its threads are daemons that end with their sockets.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

Damage = Callable[[bytes, bytes], bytes]


def _read_head(sock: socket.socket, buf: bytearray) -> bytes | None:
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    buf[:] = rest
    return head


def _read_body(sock: socket.socket, buf: bytearray, n: int, pace: float = 0.0) -> bytes:
    began, had = time.monotonic(), len(buf)
    while len(buf) < n:
        chunk = sock.recv(min(64 << 10 if pace else 1 << 20, n - len(buf)))
        if not chunk:
            raise ConnectionError("cut short")
        buf += chunk
        if pace:   # this connection's bytes so far at ``pace``: wait until they are due
            due = began + (len(buf) - had) / pace
            time.sleep(max(0.0, due - time.monotonic()))
    body = bytes(buf[:n])
    del buf[:n]
    return body


def _length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


class TamperRelay:
    def __init__(self, upstream_port: int, damage: Damage, pace: float = 0.0) -> None:
        self.upstream_port = upstream_port
        self.damage = damage
        self.pace = pace
        self.connections = 0   # client connections accepted
        self.damaged = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        up = socket.create_connection(("127.0.0.1", self.upstream_port))
        cbuf, ubuf = bytearray(), bytearray()
        try:
            while True:
                head = _read_head(client, cbuf)
                if head is None:
                    return
                body = _read_body(client, cbuf, _length(head), self.pace)
                line = head.split(b"\r\n", 1)[0]
                changed = self.damage(line, body)
                if changed != body:
                    self.damaged += 1
                up.sendall(head + b"\r\n\r\n" + changed)
                answer = _read_head(up, ubuf)
                if answer is None:
                    return
                n = 0 if line.startswith(b"HEAD ") else _length(answer)
                client.sendall(answer + b"\r\n\r\n" + _read_body(up, ubuf, n))
                if b"connection: close" in answer.lower():
                    return
        except (OSError, ConnectionError):
            return
        finally:
            client.close()
            up.close()

    def stop(self) -> None:
        self._server.close()
