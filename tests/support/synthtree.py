"""A synthetic tree of many files over HTTP/1.1, for memory and files-per-second measurements.

``python tests/support/synthtree.py --files N --size S --port 0`` serves, on 127.0.0.1:

* ``/?manifest`` (or ``Accept: application/json``): a dtune manifest naming N files
  ``dDDDD/fNNNNNNN.dat`` (1000 per directory), each S bytes;
* ``/dDDDD/fNNNNNNN.dat``: that file's S bytes (``x``), a ``Range: bytes=a-b`` answered 206;
* ``/urls.txt``: the same files as an aria2c input list (URL, then ``  out=PATH``).

Nothing is on disk: a million files cost the server only its manifest (about 50 bytes a
file, built once). Keep-alive and pipelined requests are answered in order. Prints
``serving N files on http://127.0.0.1:PORT/`` once listening; stops on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal

PER_DIR = 1000
_RANGE = re.compile(rb"bytes=(\d+)-(\d*)")
_NAME = re.compile(rb"/d(\d{4})/f(\d{7})\.dat")


def name(i: int) -> str:
    return f"d{i // PER_DIR:04d}/f{i:07d}.dat"


def manifest(files: int, size: int) -> bytes:
    return json.dumps({"dtune_manifest": 1, "base": "/",
                       "files": [{"path": name(i), "size": size} for i in range(files)]},
                      separators=(",", ":")).encode()


def url_list(files: int, base: str) -> bytes:
    return "".join(f"{base}{name(i)}\n  out={name(i)}\n" for i in range(files)).encode()


class Tree:
    def __init__(self, files: int, size: int) -> None:
        self.files, self.size = files, size
        self.body = b"x" * size
        self._manifest: bytes | None = None
        self._urls: bytes | None = None
        self.base = ""
        self.requests = 0

    def answer(self, target: bytes, headers: dict[bytes, bytes]) -> bytes:
        self.requests += 1
        path, _, query = target.partition(b"?")
        if path == b"/" and (b"manifest" in query or b"json" in headers.get(b"accept", b"")):
            if self._manifest is None:
                self._manifest = manifest(self.files, self.size)
            return _response(200, self._manifest, b"application/json")
        if path == b"/urls.txt":
            if self._urls is None:
                self._urls = url_list(self.files, self.base)
            return _response(200, self._urls, b"text/plain")
        m = _NAME.fullmatch(path)
        if m is None or int(m.group(2)) >= self.files or int(m.group(1)) != int(m.group(2)) // PER_DIR:
            return _response(404, b"not found\n", b"text/plain")
        r = _RANGE.fullmatch(headers.get(b"range", b""))
        if r is not None and self.size:
            start = int(r.group(1))
            end = min(self.size - 1, int(r.group(2))) if r.group(2) else self.size - 1
            if start >= self.size:
                return (b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */%d\r\n"
                        b"Content-Length: 0\r\n\r\n" % self.size)
            return (b"HTTP/1.1 206 Partial Content\r\nAccept-Ranges: bytes\r\nContent-Range: bytes %d-%d/%d\r\n"
                    b"Content-Length: %d\r\n\r\n" % (start, end, self.size, end - start + 1)
                    + self.body[start:end + 1])
        return (b"HTTP/1.1 200 OK\r\nAccept-Ranges: bytes\r\nContent-Length: %d\r\n\r\n" % self.size) + self.body


def _response(status: int, body: bytes, kind: bytes) -> bytes:
    reason = {200: b"OK", 404: b"Not Found"}[status]
    return (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
            % (status, reason, kind, len(body))) + body


async def serve_client(tree: Tree, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                data = await reader.read(65536)
                if not data:
                    return
                buf += data
            out = []
            while b"\r\n\r\n" in buf:  # (pipelined requests: every one in the buffer, in order)
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ")
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(b":")
                    headers[k.strip().lower()] = v.strip()
                out.append(tree.answer(parts[1] if len(parts) > 1 else b"/", headers))
            writer.write(b"".join(out))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def main(files: int, size: int, port: int) -> None:
    tree = Tree(files, size)
    server = await asyncio.start_server(lambda r, w: serve_client(tree, r, w), "127.0.0.1", port, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    tree.base = f"http://127.0.0.1:{bound}/"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"serving {files} files on {tree.base}", flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, required=True)
    ap.add_argument("--size", type=int, default=0, help="bytes of each file (default 0)")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    asyncio.run(main(a.files, a.size, a.port))
