"""A ``dtune serve --writable`` server (``http(s)://``): whole PUTs and resumable ``Content-Range`` pieces.

Recognised by ``recognise``: an ``http(s)://`` DEST whose server answers a
``HEAD`` of the destination with ``Server: dtune/…`` (what ``dtune serve``
sends on every answer, a ``401`` included) is put here; any other server is
taken for WebDAV (``davdest``). The protocol is ``docs/server.md``, "Uploads".

* A file up to 16 MiB (or ``--part-size``) is one ``PUT`` carrying
  ``Content-MD5`` and ``Repr-Digest: sha-256=:…:`` of its bytes.
* A larger file is hashed first (one pass: SHA-256 of the whole file, which
  every piece carries as ``Repr-Digest``), then sent in ``Content-Range``
  pieces of the tuned part size, p of them in flight, each with the
  ``Content-MD5`` of its own bytes (the server checks it before recording
  the piece). The piece that completes the file gets ``201``/``204`` and the
  server's ``Repr-Digest`` of what it stored; the others ``202``.
* Resume: ``begin`` asks ``HEAD`` for ``Dtune-Received`` and
  ``Dtune-Upload-Length``; the ranges received are kept (counted as resumed
  bytes) and only the missing ones are cut into pieces and sent. An
  unfinished upload of another length, or of other bytes (one byte it holds
  is sent again with the file's ``Repr-Digest``: ``409`` when the server's
  earlier pieces carried another), is dropped with ``DELETE ?upload`` and
  started afresh. A file that fails has its
  unfinished upload dropped the same way (``abort``); an interrupted run
  (Ctrl-C, ``kill -9``) leaves it for the rerun.
* Verification: the ``Repr-Digest`` the server answers for the stored file
  must equal the local file's SHA-256 (a server that answers none fails the
  file: it is not known what it stored).
* ``--sync``: the destination's dtune manifest (``GET DEST?manifest``: size
  and mtime of every file below it, one request); when it is larger than an
  answer dtune keeps (1 MiB, about 10,000 files), one ``HEAD`` per file
  (``Content-Length``, ``Last-Modified``).

``received_ranges`` parses ``Dtune-Received`` (untrusted) and ``missing``
computes what is left to send (both pure).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from email.utils import parsedate_to_datetime
from urllib.parse import quote

from dtune.checksums import Checksum
from dtune.discovery.manifest import parse_manifest
from dtune.errors import DiscoveryError, DtuneError, HTTPError, UsageError
from dtune.http.client import FetchResult
from dtune.upload.dest import Begun, IntegrityError, Remote, Sent
from dtune.upload.local import LocalFile
from dtune.upload.parts import Part
from dtune.upload.wire import MAX_ANSWER, Body, Sender

SERVER_PREFIX = "dtune/"
MAX_RANGES = 4096           # Dtune-Received ranges read at most (the server keeps at most 256)
_RANGE = re.compile(r"^([0-9]{1,19})-([0-9]{1,19})$")
_DIGEST = re.compile(r"(?:^|,)\s*sha-256=:([A-Za-z0-9+/]{43}=):\s*(?:;[^,]*)?(?=,|$)")


def received_ranges(value: str | None, total: int) -> list[tuple[int, int]] | None:
    """``Dtune-Received`` (``0-1048575,2097152-3145727``: inclusive ends) as sorted, merged
    ``[start, end)`` ranges inside ``[0, total)``; ``[]`` for an empty field, None when it does not
    parse or names a byte past ``total`` (the upload is then not resumed)."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return []
    items = text.split(",")
    if len(items) > MAX_RANGES:
        return None
    spans = []
    for item in items:
        m = _RANGE.match(item.strip())
        if m is None:
            return None
        first, last = int(m.group(1)), int(m.group(2))
        if first > last or last >= total:
            return None
        spans.append((first, last + 1))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def missing(total: int, have: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``[start, end)`` ranges of ``[0, total)`` not in ``have`` (sorted, merged, as
    ``received_ranges`` gives them)."""
    gaps, pos = [], 0
    for start, end in have:
        if start > pos:
            gaps.append((pos, start))
        pos = max(pos, end)
    if pos < total:
        gaps.append((pos, total))
    return gaps


def pieces(total: int, have: list[tuple[int, int]], size: int) -> tuple[list[Part], set[int]]:
    """Parts covering ``[0, total)`` in order: each received range one part (kept: their numbers
    back), each missing range cut every ``size`` bytes."""
    spans = [(s, e, True) for s, e in have] + [
        (s, min(s + size, e), False) for gs, e in missing(total, have) for s in range(gs, e, size)]
    spans.sort()
    parts = [Part(i + 1, s, e) for i, (s, e, _) in enumerate(spans)]
    return parts, {i + 1 for i, (_, _, kept) in enumerate(spans) if kept}


def answered_sha256(value: str | None) -> str | None:
    """The ``sha-256`` member of a ``Repr-Digest`` answer, in hex; None when there is none."""
    m = _DIGEST.search(value or "")
    return base64.b64decode(m.group(1)).hex() if m else None


def repr_digest(sha256_hex: str) -> str:
    return "sha-256=:" + base64.b64encode(bytes.fromhex(sha256_hex)).decode() + ":"


def _hash_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(4 << 20):
            h.update(chunk)
    return h.hexdigest()


def _read_at(path, at: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(at)
        byte = fh.read(1)
    if len(byte) != 1:
        raise DtuneError(f"{path}: shorter than when it was listed (did it change while being put?)")
    return byte


def _said(res: FetchResult) -> str:
    """The first line of an error answer's body (the server names the field it refused), printable."""
    text = res.body[:300].decode("utf-8", "replace").strip().splitlines()
    line = "".join(c for c in (text[0] if text else "") if c.isprintable())
    return f": {line}" if line else ""


def check(res: FetchResult, what: str, ok: tuple[int, ...]) -> None:
    if res.status in ok:
        return
    hint = ""
    if res.status == 401:
        hint = " (dtune serve --writable needs its token: --token-file FILE or --header 'Authorization: Bearer …')"
    # (507: the quota or the disk is full; sending again will not free it)
    raise HTTPError(f"{what}: HTTP {res.status}{_said(res)}{hint}", status=res.status,
                    retryable=res.status in (408, 429) or (res.status >= 500 and res.status != 507))


async def recognise(sender: Sender, url: str) -> bool:
    """Whether ``url``'s server is ``dtune serve`` (its ``Server`` header); False when it cannot be asked."""
    try:
        res = await sender.send("HEAD", url)
    except (DtuneError, OSError):
        return False
    return res.headers.get("server", "").startswith(SERVER_PREFIX)


class ServeDestination:
    multipart = True

    def __init__(self, dest: str, sender: Sender) -> None:
        if not dest.lower().startswith(("http://", "https://")):
            raise UsageError(f"{dest}: a dtune serve destination is an http:// or https:// URL")
        if "?" in dest or "#" in dest:
            raise UsageError(f"{dest}: a dtune serve destination takes no query or fragment")
        self.base = dest if dest.endswith("/") else dest + "/"
        self.sender = sender
        self.label = self.base
        self._sha: dict[str, str] = {}           # relpath → the local file's SHA-256 (hex)
        self._stored: dict[str, str | None] = {}  # relpath → the server's Repr-Digest sha-256 on completion

    def url(self, relpath: str) -> str:
        return self.base + quote(relpath, safe="/")

    def close(self) -> None:
        self.sender.close()

    async def prepare(self, files: list[LocalFile]) -> list[str]:
        return []   # (the server makes missing parents once a file is complete and checked)

    async def existing(self, files: list[LocalFile]) -> dict[str, Remote]:
        res = await self.sender.send("GET", self.base + "?manifest", {"Accept": "application/json",
                                                                     "Accept-Encoding": "identity"})
        if res.status == 404:
            return {}
        check(res, f"GET {self.base}?manifest", (200,))
        length = res.headers.get("content-length", "")
        if length.isdigit() and int(length) <= MAX_ANSWER and len(res.body) == int(length):
            try:
                listing = parse_manifest(res.body, self.label)
            except DiscoveryError as exc:
                raise DtuneError(str(exc)) from None
            return {e.name: Remote(size=e.size, mtime=e.mtime) for e in listing.entries}
        return await self._heads(files)   # (a manifest larger than an answer dtune keeps)

    async def _heads(self, files: list[LocalFile]) -> dict[str, Remote]:
        found: dict[str, Remote] = {}
        gate = asyncio.Semaphore(8)

        async def one(f: LocalFile) -> None:
            async with gate:
                res = await self.sender.send("HEAD", self.url(f.relpath))
            if res.status == 404:
                return
            check(res, f"HEAD {self.url(f.relpath)}", (200,))
            size = res.headers.get("content-length", "")
            try:
                mtime = parsedate_to_datetime(res.headers.get("last-modified", "")).timestamp()
            except (TypeError, ValueError, IndexError):
                mtime = None
            found[f.relpath] = Remote(size=int(size) if size.isdigit() else None, mtime=mtime)

        await asyncio.gather(*(one(f) for f in files))
        return found

    # ---- a file in one PUT ----------------------------------------------------------------
    async def put_whole(self, f: LocalFile, body: Body, sent: Sent) -> Remote:
        if body.data is None:
            raise DtuneError(f"{f.path}: dtune serve: a file sent whole is read into memory first")
        sha = sent.sha256 or hashlib.sha256(body.data).hexdigest()
        self._sha[f.relpath] = sha
        headers = {"Content-Type": "application/octet-stream", "Repr-Digest": repr_digest(sha)}
        if sent.md5 is not None:
            headers["Content-MD5"] = base64.b64encode(sent.md5).decode()
        res = await self.sender.send("PUT", self.url(f.relpath), headers, body)
        check(res, f"PUT {self.url(f.relpath)}", (200, 201, 204))
        return self._answer(f, res)

    def _answer(self, f: LocalFile, res: FetchResult) -> Remote:
        hexed = answered_sha256(res.headers.get("repr-digest"))
        return Remote(size=f.size, checksum=Checksum("sha256", hexed, "Repr-Digest") if hexed else None)

    # ---- a file in pieces -----------------------------------------------------------------
    async def begin(self, f: LocalFile, part_size: int, resume: bool) -> Begun:
        sha = await asyncio.to_thread(_hash_file, f.path)
        self._sha[f.relpath] = sha
        self._stored.pop(f.relpath, None)
        url = self.url(f.relpath)
        have: list[tuple[int, int]] = []
        res = await self.sender.send("HEAD", url)
        check(res, f"HEAD {url}", (200, 404))
        length = res.headers.get("dtune-upload-length")
        if length is not None:   # an unfinished upload of this path
            got = received_ranges(res.headers.get("dtune-received"), f.size) if length == str(f.size) else None
            if got and resume and not await self._same_file(f, url, sha, got[0][0]):
                got = None   # (pieces of another version of the file: they must not be mixed)
            if got is None or not resume:
                gone = await self.sender.send("DELETE", url + "?upload")
                check(gone, f"DELETE {url}?upload", (204, 404))
            else:
                have = got
        parts, kept = pieces(f.size, have, part_size)
        # (kept ranges are not read again: the whole file's SHA-256, checked by the server on
        # completion, covers them; no per-part MD5 is kept for them)
        return Begun(handle=sha, parts=parts, kept={n: ("", b"") for n in kept})

    async def _same_file(self, f: LocalFile, url: str, sha: str, at: int) -> bool:
        """Whether the unfinished upload is of this file's bytes: one byte it holds already (at ``at``)
        is sent again with the file's ``Repr-Digest``, which the server compares with the one its
        earlier pieces carried (``409`` when they differ; the same byte again changes nothing)."""
        byte = await asyncio.to_thread(_read_at, f.path, at)
        res = await self.sender.send("PUT", url, {"Content-Type": "application/octet-stream",
                                                  "Repr-Digest": repr_digest(sha),
                                                  "Content-Range": f"bytes {at}-{at}/{f.size}",
                                                  "Content-MD5": base64.b64encode(hashlib.md5(byte).digest()).decode()},
                                     Body(data=byte))
        if res.status == 409:
            return False
        check(res, f"PUT {url} (bytes {at}-{at}/{f.size}, to check the upload to resume)", (202, 201, 204))
        if res.status in (201, 204):
            self._stored[f.relpath] = answered_sha256(res.headers.get("repr-digest"))
        return True

    async def put_part(self, f: LocalFile, begun: Begun, part: Part, data: bytes, md5: bytes) -> str:
        url = self.url(f.relpath)
        headers = {"Content-Type": "application/octet-stream", "Repr-Digest": repr_digest(begun.handle),
                   "Content-Range": f"bytes {part.start}-{part.end - 1}/{f.size}",
                   "Content-MD5": base64.b64encode(md5).decode()}
        res = await self.sender.send("PUT", url, headers, Body(data=data))
        check(res, f"PUT {url} (bytes {part.start}-{part.end - 1}/{f.size})", (201, 202, 204))
        if res.status in (201, 204):
            self._stored[f.relpath] = answered_sha256(res.headers.get("repr-digest"))
        return ""

    async def complete(self, f: LocalFile, begun: Begun, sent: Sent) -> Remote:
        if f.relpath not in self._stored:
            url = self.url(f.relpath)
            res = await self.sender.send("HEAD", url)
            raise IntegrityError(f"{url}: every piece was sent but the server did not complete the file "
                                 f"(HTTP {res.status}; Dtune-Received: {res.headers.get('dtune-received', '-')})")
        hexed = self._stored.pop(f.relpath)
        return Remote(size=f.size, checksum=Checksum("sha256", hexed, "Repr-Digest") if hexed else None)

    async def abort(self, f: LocalFile, begun: Begun) -> None:
        url = self.url(f.relpath)
        res = await self.sender.send("DELETE", url + "?upload")
        check(res, f"DELETE {url}?upload", (204, 404))

    async def verify(self, f: LocalFile, sent: Sent, answered: Remote) -> str:
        url = self.url(f.relpath)
        local = self._sha.pop(f.relpath, None)
        if answered.checksum is None:
            raise IntegrityError(f"{url}: the server answered no Repr-Digest: what it stored is not known")
        if local is None or answered.checksum.hex != local:
            raise IntegrityError(f"{url}: the server's Repr-Digest sha-256 is {answered.checksum.hex}, "
                                 f"the local file's {local}")
        return "sha256 (the server's Repr-Digest)"
