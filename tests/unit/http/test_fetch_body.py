"""``Fetcher.fetch(body=...)``: a request body (a PROPFIND's XML) goes out with its Content-Length,
follows a 307 with it, and is dropped with the method on a 303 (one real socket on 127.0.0.1)."""

from __future__ import annotations

import asyncio

from dtune.http.client import Fetcher

BODY = b'<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop><D:getcontentlength/></D:prop></D:propfind>'


async def serve(answers: dict[str, bytes], seen: list[tuple[bytes, bytes]]) -> asyncio.Server:
    """Answers by request path; each request's head and body kept in ``seen``."""
    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                seen.append((head, body))
                writer.write(answers[head.split(b" ")[1].decode()])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
    return await asyncio.start_server(one, "127.0.0.1", 0)


def run(first: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    async def main() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        seen: list[tuple[bytes, bytes]] = []
        done = b"HTTP/1.1 207 Multi-Status\r\nContent-Length: 4\r\n\r\ndone"
        server = await serve({"/a/": first, "/b/": done}, seen)
        port = server.sockets[0].getsockname()[1]
        fetcher = Fetcher(timeout=5)
        try:
            res = await fetcher.fetch(f"http://127.0.0.1:{port}/a/", method="PROPFIND", headers={"Depth": "1"},
                                      body=BODY)
        finally:
            fetcher.close()
            server.close()
        return res.status, seen, res.body
    return asyncio.run(main())


def test_the_body_goes_out_with_its_length_and_follows_a_307() -> None:
    status, seen, answer = run(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /b/\r\nContent-Length: 0\r\n\r\n")
    assert (status, answer) == (207, b"done")
    assert [head.split(b" ")[:2] for head, _ in seen] == [[b"PROPFIND", b"/a/"], [b"PROPFIND", b"/b/"]]
    for head, body in seen:
        assert body == BODY and f"\r\nContent-Length: {len(BODY)}\r\n".encode() in head and b"\r\nDepth: 1\r\n" in head


def test_a_303_turns_it_into_a_get_without_the_body() -> None:
    status, seen, _ = run(b"HTTP/1.1 303 See Other\r\nLocation: /b/\r\nContent-Length: 0\r\n\r\n")
    assert status == 207
    (head, body), = seen[1:]
    assert head.startswith(b"GET /b/ ") and body == b"" and b"Content-Length" not in head
