"""``DavServer``: a WebDAV door shaped like dCache's, with the checksums it publishes, and hostile
multistatus answers on demand.

It serves an in-memory ``{path: bytes}`` tree (directories are the paths'
parents, plus ``empty_dirs``) on 127.0.0.1 (``core``):

- ``PROPFIND`` on a directory (``Depth: 1``; the request body is read and
  kept in ``propfinds``) answers ``207`` with the directory and its members:
  ``resourcetype``, ``getcontentlength``, ``getlastmodified``, ``getetag``
  and, as dCache does in its own namespace, ``Checksums`` —
  ``adler32=HEX,md5=BASE64`` (``checksums`` overrides a file's value, e.g.
  a wrong one). Hrefs are absolute paths, percent-encoded, collections with
  a trailing '/'. ``listings`` replaces a directory's answer with raw bytes
  (hostile multistatus documents).
- ``HEAD`` and ``GET`` of a file answer it honestly (Range, 206) with a
  ``Digest`` header chosen as dCache does from ``Want-Digest``: the first
  algorithm asked that it keeps (adler32, md5, sha-256); ``digests``
  overrides a file's header value.
- ``GET`` of a directory answers 403 (``index=False``: a door without an
  HTML index, so only PROPFIND lists it).
- ``writable=True``: ``MKCOL`` makes a directory (201; 405 when it exists, 409 when its parent
  does not) and ``PUT`` stores a file (201; 409 without its directory), its headers kept in
  ``puts``; the Checksums property and Digest headers then publish the stored bytes' digests
  (``checksums``/``digests`` still override them: a server that lies about what it holds).
- ``user``/``password``: every request without that Basic ``Authorization``
  gets 401. Each request's ``Authorization`` (or None) is kept in
  ``authorizations``, and ``Want-Digest`` headers in ``want_digests``.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from urllib.parse import quote
from xml.sax.saxutils import escape

from .core import MTIME, Exchange, Server, etag


def adler32(data: bytes) -> str:
    return f"{zlib.adler32(data):08x}"


def b64(algo: str, data: bytes) -> str:
    return base64.b64encode(hashlib.new(algo, data).digest()).decode()


class DavServer(Server):
    """See the module docstring."""

    linger = True

    def __init__(self, files: dict[str, bytes], *, empty_dirs: tuple[str, ...] = (), user: str | None = None,
                 password: str | None = None, index: bool = False, writable: bool = False) -> None:
        super().__init__(files, name="fake-dav")
        self.writable = writable
        self.puts: list[tuple[str, dict[str, str]]] = []   # (path, headers) of each PUT stored
        self.dirs = {"/"} | {p if p.endswith("/") else p + "/" for p in empty_dirs}
        for path in files:
            parts = path.split("/")[1:-1]
            for i in range(len(parts)):
                self.dirs.add("/" + "/".join(parts[: i + 1]) + "/")
        self.checksums: dict[str, str] = {}    # path -> the Checksums property's value
        self.digests: dict[str, str] = {}      # path -> the Digest header's value
        self.listings: dict[str, bytes] = {}   # directory path -> the raw PROPFIND answer
        self.index = index
        self.auth = None if user is None else "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.authorizations: list[str | None] = []
        self.want_digests: list[str | None] = []
        self.propfinds: list[tuple[str, str | None, bytes]] = []   # (path, Depth, body)

    # ---- what is published -------------------------------------------------------------------
    def checksum_property(self, path: str) -> str:
        data = self.files[path]
        return self.checksums.get(path, f"adler32={adler32(data)},md5={b64('md5', data)}")

    def digest_header(self, path: str, want: str | None) -> str | None:
        if path in self.digests:
            return self.digests[path]
        data = self.files[path]
        kept = {"adler32": adler32(data), "md5": b64("md5", data), "sha-256": b64("sha256", data)}
        for member in (want or "").split(","):
            algo = member.split(";")[0].strip().lower()
            if algo in kept:
                return f"{algo}={kept[algo]}"
        return None

    def multistatus(self, directory: str) -> bytes:
        members = sorted({p for p in [*self.files, *self.dirs] if p != directory and p.startswith(directory)
                          and "/" not in p[len(directory):].rstrip("/")})
        parts = [self._response(directory)] + [self._response(p) for p in members]
        return ('<?xml version="1.0" encoding="utf-8"?>\n<d:multistatus xmlns:d="DAV:" '
                'xmlns:ns1="http://www.dcache.org/2013/webdav">' + "".join(parts) + "</d:multistatus>").encode()

    def _response(self, path: str) -> str:
        href = escape(quote(path))
        props = [f"<d:getlastmodified>{MTIME}</d:getlastmodified>"]
        if path in self.dirs:
            props.append("<d:resourcetype><d:collection/></d:resourcetype>")
        else:
            data = self.files[path]
            props += ["<d:resourcetype/>", f"<d:getcontentlength>{len(data)}</d:getcontentlength>",
                      f"<d:getetag>{escape(etag(data))}</d:getetag>",
                      f"<ns1:Checksums>{escape(self.checksum_property(path))}</ns1:Checksums>"]
        return (f"<d:response><d:href>{href}</d:href><d:propstat><d:prop>{''.join(props)}</d:prop>"
                "<d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>")

    # ---- answering ---------------------------------------------------------------------------
    async def answer(self, exchange: Exchange) -> bool:
        request, headers = exchange.request, exchange.headers
        body = b""
        length = headers.get("content-length", "0")
        if length.isdigit() and int(length):
            body = await exchange.reader.readexactly(int(length))
        self.authorizations.append(headers.get("authorization"))
        self.want_digests.append(headers.get("want-digest"))
        if self.auth is not None and headers.get("authorization") != self.auth:
            return exchange.simple(401, {"WWW-Authenticate": 'Basic realm="dcache"'})
        path = request.path
        if request.method == "PROPFIND":
            self.propfinds.append((path, headers.get("depth"), body))
            if path in self.listings:
                return self._xml(exchange, self.listings[path])
            if path in self.dirs:
                return self._xml(exchange, self.multistatus(path))
            if path in self.files:
                return self._xml(exchange, ('<d:multistatus xmlns:d="DAV:" xmlns:ns1="http://www.dcache.org/2013/'
                                            'webdav">' + self._response(path)
                                            + "</d:multistatus>").encode())
            return exchange.simple(404)
        if self.writable and request.method in ("MKCOL", "PUT"):
            return self._write(exchange, path, body)
        if request.method not in ("GET", "HEAD"):
            return exchange.simple(405, {"Allow": "GET, HEAD, PROPFIND"})
        if path in self.dirs:
            return exchange.simple(403)
        if exchange.data is None:
            return exchange.simple(404)
        digest = self.digest_header(path, headers.get("want-digest"))
        extra = {"Last-Modified": MTIME, **({"Digest": digest} if digest else {})}
        start, end = exchange.promise(extra)
        request.status = 206 if isinstance(exchange.span, tuple) else 200
        if request.method == "GET":
            exchange.writer.write(exchange.data[start:end])
            request.span, request.sent = (start, end), end - start
        return True

    def _write(self, exchange: Exchange, path: str, body: bytes) -> bool:
        if exchange.request.method == "MKCOL":
            folder = path if path.endswith("/") else path + "/"
            if folder in self.dirs or folder[:-1] in self.files:
                return exchange.simple(405)
            if folder[:-1].rpartition("/")[0] + "/" not in self.dirs:
                return exchange.simple(409)
            self.dirs.add(folder)
            return exchange.simple(201)
        if path.endswith("/") or path.rpartition("/")[0] + "/" not in self.dirs:
            return exchange.simple(409)
        self.files[path] = body
        self.puts.append((path, dict(exchange.headers)))
        return exchange.simple(201)

    def _xml(self, exchange: Exchange, body: bytes) -> bool:
        exchange.request.status = 207
        exchange.head(207, {"Content-Type": 'application/xml; charset="utf-8"', "Content-Length": str(len(body)),
                            "DAV": "1, 2"})
        exchange.writer.write(body)
        exchange.request.sent = len(body)
        return True
