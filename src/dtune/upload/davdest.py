"""A WebDAV collection (``dav://``, ``davs://``, or ``http(s)://`` to a DAV server): PUT and MKCOL.

``prepare`` makes every collection the files need, parents first (``MKCOL``;
405 means it is there already; a destination collection whose parent is
missing has its missing ancestors made from the top down). Each file is one
``PUT`` (WebDAV has no standard upload in parts: a large file goes whole, its
bytes read from disk as they are sent). A file up to 16 MiB is read and
hashed first and carries ``Content-MD5`` and an RFC 3230 ``Digest:
sha-256=…`` header, which servers that check digests (dCache) use and others
ignore; a larger one carries none (they would cost a pass over it before its
first byte is sent). It is hashed (SHA-256) as it is sent only with
``--verify-read``; a digest the server publishes is compared with the local
file hashed after the upload (its size and mtime unchanged).

Verification: the file's own ``PROPFIND`` (``Depth: 0``, on a kept
connection) must give the size; a checksum property (dCache's, ownCloud's) is
compared with the local bytes' (hashed again with its algorithm when that is
neither MD5 nor SHA-256). A server that does not answer it with a multistatus
is asked a ``HEAD`` with ``Want-Digest`` (size; ``Digest``, ``Repr-Digest``,
``Content-MD5``). A server that publishes none is checked on size
only, unless ``--verify-read`` reads every file back and compares its SHA-256.

``existing`` (``--sync``) lists each collection once (``PROPFIND Depth: 1``,
``discovery.webdav``): size, ``getlastmodified`` and the checksums dCache and
ownCloud publish. Not done: resuming a file cut short (a rerun sends it whole
again; WebDAV has no ranged PUT every server takes).
"""

from __future__ import annotations

import asyncio
import base64
from urllib.parse import quote

from dtune import checksums
from dtune.discovery.urls import WANT_DIGEST, checksum_from_headers, from_dav
from dtune.discovery.webdav import PROPFIND_BODY, PROPFIND_HEADERS, parse_multistatus
from dtune.errors import DiscoveryError, DtuneError, HTTPError, UsageError
from dtune.http.client import FetchResult
from dtune.upload.dest import Begun, IntegrityError, Remote, Sent
from dtune.upload.local import LocalFile
from dtune.upload.parts import Part
from dtune.upload.wire import Body, Sender


def check(res: FetchResult, what: str, ok: tuple[int, ...]) -> None:
    if res.status in ok:
        return
    hint = " (refused: give credentials with --netrc, --header or --token-env)" if res.status in (401, 403) else ""
    raise HTTPError(f"{what}: HTTP {res.status}{hint}", status=res.status,
                    retryable=res.status in (408, 429) or res.status >= 500)


def hash_file(path, algo: str) -> str:
    h = checksums.hasher(algo)
    with open(path, "rb") as fh:
        while chunk := fh.read(4 << 20):
            h.update(chunk)
    return h.hexdigest()


class DavDestination:
    multipart = False

    def __init__(self, dest: str, sender: Sender, *, verify_read: bool) -> None:
        base = from_dav(dest) or dest
        if not base.lower().startswith(("http://", "https://")):
            raise UsageError(f"{dest}: not a dav://, davs:// or http(s):// URL")
        if "?" in base or "#" in base:
            raise UsageError(f"{dest}: a WebDAV destination takes no query or fragment")
        if not base.endswith("/"):
            base += "/"
        self.base = base
        self.sender = sender
        self.verify_read = verify_read
        # a file sent whole is hashed as it is sent only when its SHA-256 will be needed for sure
        # (--verify-read); a digest the server publishes is compared with the file hashed afterwards
        self.hash_in_flight = verify_read
        self.label = base

    def url(self, relpath: str) -> str:
        return self.base + quote(relpath, safe="/")

    def close(self) -> None:
        self.sender.close()

    async def _mkcol(self, url: str) -> int:
        res = await self.sender.send("MKCOL", url)
        return res.status

    async def prepare(self, files: list[LocalFile]) -> list[str]:
        status = await self._mkcol(self.base)
        if status == 409:   # a parent is missing: make them from the top down
            scheme, _, rest = self.base.partition("://")
            host, _, path = rest.partition("/")
            segments = [s for s in path.split("/") if s]
            for depth in range(1, len(segments)):
                await self._mkcol(f"{scheme}://{host}/" + "/".join(segments[:depth]) + "/")
            status = await self._mkcol(self.base)
        if status not in (200, 201, 204, 405, 301):
            raise HTTPError(f"MKCOL {self.base}: HTTP {status}", status=status, retryable=status >= 500)
        dirs = sorted({"/".join(f.relpath.split("/")[:i]) for f in files for i in range(1, f.relpath.count("/") + 1)},
                      key=lambda d: (d.count("/"), d))
        gate = asyncio.Semaphore(8)

        async def make(d: str) -> None:
            async with gate:
                res = await self.sender.send("MKCOL", self.url(d) + "/")
            check(res, f"MKCOL {self.url(d)}/", (200, 201, 204, 405, 301))

        for depth in sorted({d.count("/") for d in dirs}):
            await asyncio.gather(*(make(d) for d in dirs if d.count("/") == depth))
        return []

    async def existing(self, files: list[LocalFile]) -> dict[str, Remote]:
        found: dict[str, Remote] = {}
        for folder in sorted({f.relpath.rpartition("/")[0] for f in files}):
            url = self.base + (quote(folder, safe="/") + "/" if folder else "")
            res = await self.sender.send("PROPFIND", url, PROPFIND_HEADERS | {"Accept-Encoding": "identity"},
                                         Body(data=PROPFIND_BODY, payload=False))
            if res.status == 404:
                continue
            check(res, f"PROPFIND {url}", (207,))
            try:
                listing = parse_multistatus(res.body, url, self.label)
            except DiscoveryError as exc:
                raise DtuneError(str(exc)) from None
            for entry in listing.entries:
                if not entry.is_dir:
                    name = f"{folder}/{entry.name}" if folder else entry.name
                    found[name] = Remote(size=entry.size, mtime=entry.mtime, checksum=entry.checksum)
        return found

    async def put_whole(self, f: LocalFile, body: Body, sent: Sent) -> Remote:
        headers = {"Content-Type": "application/octet-stream"}
        if sent.md5 is not None:
            headers["Content-MD5"] = base64.b64encode(sent.md5).decode()
        if sent.sha256 is not None:
            headers["Digest"] = "sha-256=" + base64.b64encode(bytes.fromhex(sent.sha256)).decode()
        res = await self.sender.send("PUT", self.url(f.relpath), headers, body)
        check(res, f"PUT {self.url(f.relpath)}", (200, 201, 204))
        return Remote(size=sent.size)

    async def begin(self, f: LocalFile, part_size: int, resume: bool) -> Begun:
        raise DtuneError("WebDAV: uploads in parts are not implemented (each file is one PUT)")

    async def put_part(self, f: LocalFile, begun: Begun, part: Part, data: bytes, md5: bytes) -> str:
        raise DtuneError("WebDAV: uploads in parts are not implemented (each file is one PUT)")

    async def complete(self, f: LocalFile, begun: Begun, sent: Sent) -> Remote:
        raise DtuneError("WebDAV: uploads in parts are not implemented (each file is one PUT)")

    async def abort(self, f: LocalFile, begun: Begun) -> None:
        return None

    async def _read_back(self, url: str, sent: Sent) -> str:
        got = await self.sender.read_digest(url)
        if got is None:
            raise IntegrityError(f"{url}: cannot be read back to verify it")
        sha, size = got
        if size != sent.size:
            raise IntegrityError(f"{url}: read back, it holds {size} bytes, {sent.size} were sent")
        if sha != sent.sha256:
            raise IntegrityError(f"{url}: read back, its sha256 is {sha}, the local file's {sent.sha256}")
        return "size and sha256 (read back)"

    async def _propfind(self, f: LocalFile) -> Remote | None:
        """The file's own properties (``PROPFIND Depth: 0``, parsed as a member of its collection);
        None when the server does not answer it with a multistatus naming the file."""
        url = self.url(f.relpath)
        folder = url.rpartition("/")[0] + "/"
        res = await self.sender.send("PROPFIND", url, PROPFIND_HEADERS | {"Depth": "0", "Accept-Encoding": "identity"},
                                     Body(data=PROPFIND_BODY, payload=False))
        if res.status != 207:
            return None
        try:
            listing = parse_multistatus(res.body, folder, self.label)
        except DiscoveryError:
            return None
        found = [e for e in listing.entries if not e.is_dir and e.name == f.relpath.rpartition("/")[2]]
        if len(found) != 1 or found[0].size is None:
            return None
        return Remote(size=found[0].size, mtime=found[0].mtime, checksum=found[0].checksum)

    async def _compare(self, f: LocalFile, sent: Sent, published, url: str) -> str:
        if published.algo == "md5" and sent.md5 is not None:
            local = sent.md5.hex()
        elif published.algo == "sha256" and sent.sha256 is not None:
            local = sent.sha256
        else:
            local = await asyncio.to_thread(hash_file, f.path, published.algo)
        if local != published.hex:
            raise IntegrityError(f"{url}: the server's {published.algo} is {published.hex}, "
                                 f"the local file's {local}")
        return f"size and {published.algo} ({published.source})"

    async def verify(self, f: LocalFile, sent: Sent, answered: Remote) -> str:
        url = self.url(f.relpath)
        props = await self._propfind(f)   # (kept alive, where a HEAD's connection must be dropped)
        if props is not None:
            if props.size != sent.size:
                raise IntegrityError(f"{url}: the server holds {props.size} bytes, {sent.size} were sent")
            if props.checksum is not None:
                return await self._compare(f, sent, props.checksum, url)
            if self.verify_read:
                return await self._read_back(url, sent)
            return "size (the server publishes no digest; --verify-read reads files back)"
        res = await self.sender.send("HEAD", url, {"Want-Digest": WANT_DIGEST})
        check(res, f"HEAD {url}", (200,))
        size = res.headers.get("content-length", "")
        if not size:   # (Apache names no length for an empty file): what it holds, read back
            return await self._read_back(url, sent)
        if not size.isdigit() or int(size) != sent.size:
            raise IntegrityError(f"{url}: the server holds {size or 'an unknown number of'} bytes, "
                                 f"{sent.size} were sent")
        published = checksum_from_headers(res.headers)
        if published is not None:
            return await self._compare(f, sent, published, url)
        if self.verify_read:
            return await self._read_back(url, sent)
        return "size (the server publishes no digest; --verify-read reads files back)"

