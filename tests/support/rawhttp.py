"""A raw HTTP/1.1 client for assertions on the exact bytes a server sends.

``exchange`` sends raw bytes on a fresh connection and returns everything the
server sent until it closed (or a timeout); ``request`` builds a request head
(any target bytes, method, headers, version); ``status_of`` / ``body_of``
take an answer apart.
"""

from __future__ import annotations

import contextlib
import re
import socket

STATUS_LINE = re.compile(rb"^HTTP/1\.[01] ([1-5]\d\d) [^\r\n]*\r\n")


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_until_closed(sock: socket.socket, timeout: float = 5.0, limit: int = 1 << 22) -> tuple[bytes, bool]:
    """Everything the peer sends until it closes (True) or ``timeout`` passes quietly (False)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while len(data) < limit:
            chunk = sock.recv(65536)
            if not chunk:
                return data, True
            data += chunk
    except TimeoutError:
        return data, False
    except ConnectionResetError:
        return data, True
    return data, False


def exchange(port: int, payload: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
    """Send ``payload`` on a new connection, half-close, and return (all bytes received, closed by server)."""
    with connect(port, timeout) as sock:
        with contextlib.suppress(OSError):  # the server may refuse and close before all of it is sent
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        return read_until_closed(sock, timeout)


def request(target: bytes | str, method: str = "GET", headers: dict[str, str] | None = None,
            version: str = "1.1") -> bytes:
    raw = target if isinstance(target, bytes) else target.encode()
    lines = [method.encode() + b" " + raw + b" HTTP/" + version.encode(), b"Host: 127.0.0.1"]
    lines += [f"{k}: {v}".encode() for k, v in (headers or {}).items()]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def status_of(data: bytes) -> int:
    m = STATUS_LINE.match(data)
    return int(m.group(1)) if m else 0


def body_of(data: bytes) -> bytes:
    return data.partition(b"\r\n\r\n")[2]
