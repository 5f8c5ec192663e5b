"""``s3://BUCKET/PREFIX/``: one PUT per small file, a multipart upload per large one (module ``dest``).

Each request goes through ``wire.Sender`` on dtune's connections, signed by
``SigV4Signer`` for the endpoint's origin only (``UNSIGNED-PAYLOAD``: the
bytes are covered by ``Content-MD5`` instead, which S3 checks on every PUT
and part and refuses with ``BadDigest`` when they differ). The key of a file
is the prefix plus its safe relative path. Each object carries its local
mtime as ``x-amz-meta-mtime`` (seconds, as rclone writes it), which
``--sync`` compares.

Resume (``begin`` with ``resume``): the bucket's incomplete uploads of the
key are listed (``ListMultipartUploads``, the newest taken), then its parts
(``ListParts``); a listed part is kept only when its size is the part's and
its ETag is the MD5 of the local bytes at that place. An upload whose first
part has another size (an earlier run with another ``--part-size``) is
resumed with that size when it is a valid one.

Flexible checksums: a multipart upload is started with
``x-amz-checksum-algorithm: CRC32``; when the answer names that algorithm back
(the server takes it), each part carries ``x-amz-checksum-crc32`` (S3 checks
it and refuses a damaged part with ``BadDigest``) instead of ``Content-MD5``,
and the parts are hashed with CRC32 only (``parts.composite_crc32``). A
server that does not name it back gets Content-MD5 as before; so does
``--content-md5``. A one-PUT file keeps Content-MD5 (its answer is its check).

Verification: the ETag S3 answers to a PUT must be the MD5 of the bytes (S3
has checked the Content-MD5 too: that answer is the verification of a one-PUT
file); to ``CompleteMultipartUpload`` the MD5 of the parts' MD5s and ``-N``,
and then a ``HEAD`` of the object must give the size and the same ETag. An
upload with CRC32 checksums is checked by the ``HEAD`` (``x-amz-checksum-mode:
ENABLED``): the size and the COMPOSITE CRC32 S3 computed from the parts it
holds must be the local parts' (the ETag, an MD5 of MD5s dtune did not
compute, is not compared). An
object under SSE-KMS or SSE-C, whose ETag is no digest, is checked by the
``HEAD`` on its size only, and says so.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import zlib
from urllib.parse import quote

from dtune.discovery.s3 import S3Settings, error_reason, parse_source
from dtune.errors import HTTPError, UsageError
from dtune.http.client import FetchResult
from dtune.upload import s3xml
from dtune.upload.dest import Begun, IntegrityError, Remote, Sent
from dtune.upload.local import LocalFile
from dtune.upload.parts import (
    S3_MAX_PARTS,
    S3_MIN_PART,
    Part,
    clean_crc32,
    clean_etag,
    composite_crc32,
    crc32_b64,
    cut,
    etag_is_digest,
    multipart_etag,
)
from dtune.upload.wire import Body, Sender

RETRY_CODES = ("BadDigest", "InvalidDigest", "RequestTimeout", "SlowDown", "InternalError")


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def md5_of(path: os.PathLike[str] | str, start: int, end: int) -> tuple[bytes, int]:
    """The MD5 and CRC32 of bytes ``[start, end)`` of a file (a thread's work: hashlib and zlib drop
    the GIL)."""
    h, crc = hashlib.md5(), 0
    with open(path, "rb") as fh:
        fh.seek(start)
        left = end - start
        while left > 0:
            chunk = fh.read(min(left, 4 << 20))
            if not chunk:
                raise OSError(f"{path}: shorter than {end} bytes")
            h.update(chunk)
            crc = zlib.crc32(chunk, crc)
            left -= len(chunk)
    return h.digest(), crc


def check(res: FetchResult, what: str, ok: tuple[int, ...] = (200,)) -> None:
    """HTTPError for an answer outside ``ok``: retryable for 408, 429, 5xx and S3's digest and
    timeout codes (a part damaged on its way is sent again)."""
    if res.status in ok:
        return
    reason = error_reason(res)
    retry = res.status in (408, 429) or res.status >= 500 or any(code in reason for code in RETRY_CODES)
    raise HTTPError(f"{what}: {reason}", status=res.status, retryable=retry)


def mtime_header(value: str | None) -> float | None:
    try:
        mtime = float(value) if value else None
    except ValueError:
        return None
    return mtime if mtime is not None and 0 <= mtime < 1e11 else None


class S3Destination:
    multipart = True

    def __init__(self, dest: str, settings: S3Settings, sender: Sender, *, signed: bool,
                 flexible: bool = True) -> None:
        self.bucket, prefix = parse_source(dest)
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        if prefix.startswith("/") or any(seg in ("..", ".") for seg in prefix.split("/")[:-1]):
            raise UsageError(f"{dest}: a prefix with '.' or '..' segments or a leading '/' is refused")
        self.prefix = prefix
        self.settings = settings
        self.sender = sender
        self.signed = signed
        self.flexible = flexible   # ask for CRC32 flexible checksums on uploads in parts
        self.label = f"s3://{self.bucket}/{prefix}"

    def key(self, relpath: str) -> str:
        return self.prefix + relpath

    def url(self, relpath: str) -> str:
        return self.settings.object_url(self.bucket, self.key(relpath))

    def close(self) -> None:
        self.sender.close()

    async def prepare(self, files: list[LocalFile]) -> list[str]:
        res = await self.sender.send("HEAD", self.settings.bucket_url(self.bucket) + "/")
        if res.status == 404:
            raise UsageError(f"{self.label}: no such bucket at {self.settings.endpoint}")
        hint = "" if self.signed or res.status != 403 else " (unsigned: no AWS credentials were found)"
        if res.status != 200:
            raise HTTPError(f"{self.label}: the bucket answers HTTP {res.status}{hint}", status=res.status,
                            retryable=res.status >= 500)
        return []

    async def _head(self, relpath: str, headers: dict[str, str] | None = None) -> tuple[FetchResult, Remote | None]:
        res = await self.sender.send("HEAD", self.url(relpath), headers)
        if res.status == 404:
            return res, None
        check(res, f"HEAD {self.key(relpath)}")
        size = res.headers.get("content-length", "")
        return res, Remote(size=int(size) if size.isdigit() else None,
                           mtime=mtime_header(res.headers.get("x-amz-meta-mtime")),
                           etag=clean_etag(res.headers.get("etag")) if etag_is_digest(res.headers) else None)

    async def existing(self, files: list[LocalFile]) -> dict[str, Remote]:
        gate = asyncio.Semaphore(16)

        async def one(f: LocalFile) -> tuple[str, Remote | None]:
            async with gate:
                return f.relpath, (await self._head(f.relpath))[1]

        found = await asyncio.gather(*(one(f) for f in files))
        return {name: remote for name, remote in found if remote is not None}

    def _meta(self, f: LocalFile) -> dict[str, str]:
        return {"Content-Type": "application/octet-stream", "x-amz-meta-mtime": f"{f.mtime:.6f}"}

    async def put_whole(self, f: LocalFile, body: Body, sent: Sent) -> Remote:
        headers = self._meta(f)
        if sent.md5 is not None:
            headers["Content-MD5"] = b64(sent.md5)
        res = await self.sender.send("PUT", self.url(f.relpath), headers, body)
        check(res, f"PUT {self.key(f.relpath)}")
        etag = clean_etag(res.headers.get("etag")) if etag_is_digest(res.headers) else None
        return Remote(size=sent.size, etag=etag)

    def _upload_url(self, relpath: str, upload_id: str, extra: str = "") -> str:
        return f"{self.url(relpath)}?{extra}uploadId={quote(upload_id, safe='')}"

    async def _find(self, key: str) -> s3xml.Upload | None:
        """The newest incomplete upload of exactly ``key``. The prefix asked is the key up to its first
        '/' (moto's signature check refuses a '/' in a query, escaped or not; S3 takes either): the
        answer is filtered to the exact key."""
        found: list[s3xml.Upload] = []
        markers = ""
        asked = key.partition("/")[0]
        for _ in range(100):   # (1000 uploads a page: far more than one key has)
            res = await self.sender.send(
                "GET", f"{self.settings.bucket_url(self.bucket)}/?uploads&prefix={quote(asked, safe='')}{markers}")
            check(res, f"list the incomplete uploads of {key}")
            page, key_marker, id_marker = s3xml.parse_uploads(res.body, _bad(f"uploads of {key}"))
            found += [u for u in page if u.key == key]
            if key_marker is None and id_marker is None:
                break
            markers = f"&key-marker={quote(key_marker or '', safe='')}&upload-id-marker={quote(id_marker or '', safe='')}"
        return max(found, key=lambda u: u.initiated) if found else None

    async def _parts(self, relpath: str, upload_id: str) -> list[s3xml.ListedPart]:
        parts: list[s3xml.ListedPart] = []
        marker: int | None = 0
        while marker is not None and len(parts) <= S3_MAX_PARTS:
            extra = f"part-number-marker={marker}&" if marker else ""
            res = await self.sender.send("GET", self._upload_url(relpath, upload_id, extra))
            check(res, f"list the parts of {self.key(relpath)}")
            page, marker = s3xml.parse_parts(res.body, _bad(f"parts of {self.key(relpath)}"))
            parts += page
        return parts

    async def begin(self, f: LocalFile, part_size: int, resume: bool) -> Begun:
        key = self.key(f.relpath)
        if resume:
            upload = await self._find(key)
            if upload is not None and upload.checksum not in ("", "CRC32"):
                upload = None   # (started with another algorithm, by another tool: started afresh)
            if upload is not None:
                listed = await self._parts(f.relpath, upload.upload_id)
                first = next((p for p in listed if p.number == 1), None)
                if (first is not None and first.size != part_size and first.size >= S3_MIN_PART
                        and -(-f.size // first.size) <= S3_MAX_PARTS and first.size < f.size):
                    part_size = first.size   # (an earlier run's part size: its parts fit only that)
                begun = Begun(upload.upload_id, cut(f.size, part_size), checksum=upload.checksum or None)
                by_number = {p.number: p for p in begun.parts}
                for item in listed:
                    part = by_number.get(item.number)
                    if part is None or item.size != part.size or item.etag is None:
                        continue
                    md5, crc = await asyncio.to_thread(md5_of, f.path, part.start, part.end)
                    if md5.hex() == item.etag:
                        begun.kept[part.number] = (item.etag, md5)
                        begun.kept_crc32s[part.number] = crc
                return begun
        headers = self._meta(f) | ({"x-amz-checksum-algorithm": "CRC32"} if self.flexible else {})
        res = await self.sender.send("POST", f"{self.url(f.relpath)}?uploads", headers)
        check(res, f"start the upload of {key}")
        upload_id, algo = s3xml.parse_initiated(res.body, _bad(f"start of {key}"))
        algo = algo or res.headers.get("x-amz-checksum-algorithm", "").strip().upper()
        return Begun(upload_id, cut(f.size, part_size), checksum="CRC32" if self.flexible and algo == "CRC32" else None)

    async def put_part(self, f: LocalFile, begun: Begun, part: Part, data: bytes, md5: bytes | None,
                       crc32: int | None = None) -> str:
        url = self._upload_url(f.relpath, begun.handle, f"partNumber={part.number}&")
        what = f"part {part.number} of {self.key(f.relpath)}"
        if md5 is None:   # flexible checksums: S3 checks the CRC32; the ETag answered completes the upload
            assert crc32 is not None
            ours = crc32_b64(crc32)
            res = await self.sender.send("PUT", url, {"x-amz-checksum-crc32": ours, "x-amz-sdk-checksum-algorithm": "CRC32"},
                                         Body(data=data))
            check(res, what)
            answered = res.headers.get("x-amz-checksum-crc32")
            if answered is not None and clean_crc32(answered) != ours:
                raise IntegrityError(f"{what}: S3 answered CRC32 {answered[:40]!r}, the part's is {ours}")
            etag = clean_etag(res.headers.get("etag"))
            if etag is None:
                raise HTTPError(f"{what}: S3 answered no ETag (it is needed to complete the upload)", retryable=False)
            return etag
        res = await self.sender.send("PUT", url, {"Content-MD5": b64(md5)}, Body(data=data))
        check(res, what)
        etag = clean_etag(res.headers.get("etag"))
        if etag is not None and etag != md5.hex():
            raise IntegrityError(f"part {part.number} of {self.key(f.relpath)}: S3 answered ETag {etag}, "
                                 f"the part's MD5 is {md5.hex()}")
        return etag or md5.hex()

    async def complete(self, f: LocalFile, begun: Begun, sent: Sent) -> Remote:
        if sent.part_crc32s is not None:
            assert sent.part_etags is not None
            etags = list(enumerate(sent.part_etags, 1))
            xml = s3xml.complete_body(etags, [crc32_b64(c) for c in sent.part_crc32s])
        else:
            assert sent.part_md5s is not None
            xml = s3xml.complete_body([(i + 1, m.hex()) for i, m in enumerate(sent.part_md5s)])
        res = await self.sender.send("POST", self._upload_url(f.relpath, begun.handle),
                                     {"Content-Type": "application/xml"}, Body(data=xml, payload=False))
        check(res, f"complete {self.key(f.relpath)}")
        etag = s3xml.parse_complete(res.body, _bad(f"completion of {self.key(f.relpath)}"))
        return Remote(size=sent.size, etag=etag)

    async def abort(self, f: LocalFile, begun: Begun) -> None:
        res = await self.sender.send("DELETE", self._upload_url(f.relpath, begun.handle))
        check(res, f"abort the upload of {self.key(f.relpath)}", ok=(200, 204, 404))

    async def verify(self, f: LocalFile, sent: Sent, answered: Remote) -> str:
        key = self.key(f.relpath)
        if sent.part_crc32s is not None:
            return await self._verify_crc32(f, sent)
        if sent.part_md5s is not None:
            expected, how = multipart_etag(sent.part_md5s), f"ETag (MD5 of {len(sent.part_md5s)} part MD5s)"
        else:
            assert sent.md5 is not None
            expected, how = sent.md5.hex(), "ETag (MD5)"
        if answered.etag is not None and answered.etag != expected:
            raise IntegrityError(f"{key}: S3 answered ETag {answered.etag}, the bytes sent give {expected}")
        if answered.etag == expected and sent.part_md5s is None:
            # one PUT: S3 checked the Content-MD5 and answered the stored object's ETag, its MD5
            return f"{how}, answered by the PUT"
        res, remote = await self._head(f.relpath)
        if remote is None:
            raise IntegrityError(f"{key}: not found after its upload (HEAD answers 404)")
        if remote.size != sent.size:
            raise IntegrityError(f"{key}: S3 holds {remote.size} bytes, {sent.size} were sent")
        if not etag_is_digest(res.headers):
            return "size (an encrypted object's ETag is no digest)"
        if remote.etag != expected:
            raise IntegrityError(f"{key}: S3 holds ETag {remote.etag}, the bytes sent give {expected}")
        return f"size and {how}"

    async def _verify_crc32(self, f: LocalFile, sent: Sent) -> str:
        key = self.key(f.relpath)
        assert sent.part_crc32s is not None
        expected = composite_crc32(sent.part_crc32s)
        res, remote = await self._head(f.relpath, {"x-amz-checksum-mode": "ENABLED"})
        if remote is None:
            raise IntegrityError(f"{key}: not found after its upload (HEAD answers 404)")
        if remote.size != sent.size:
            raise IntegrityError(f"{key}: S3 holds {remote.size} bytes, {sent.size} were sent")
        held = res.headers.get("x-amz-checksum-crc32")
        if held is None:
            raise IntegrityError(f"{key}: S3 took CRC32 checksums for its parts but names none for the object "
                                 "(HEAD with x-amz-checksum-mode); --content-md5 verifies by ETags instead")
        got = clean_crc32(held)   # (S3 writes b64-N; moto's HEAD leaves the -N out: the CRC32 itself must agree)
        if got is None or (got != expected and got != expected.partition("-")[0]):
            # (S3 checks each part's CRC32 and refuses a damaged one; a server that only echoes them made
            # an object of damaged bytes: it is deleted, so that no --sync takes it for the file)
            gone = await self.sender.send("DELETE", self.url(f.relpath))
            fate = "deleted" if gone.status in (200, 204) else f"NOT deleted (HTTP {gone.status})"
            raise IntegrityError(f"{key}: S3 holds CRC32 {held[:40]!r}, the parts sent give {expected}; "
                                 f"the object is {fate}")
        return f"size and CRC32 (composite of {len(sent.part_crc32s)} part CRC32s)"


def _bad(what: str):
    def bad(why: str) -> HTTPError:
        return HTTPError(f"{what}: {why}", retryable=False)
    return bad


