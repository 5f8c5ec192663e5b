"""Expiring links and mirrors that say no, against real servers on loopback (issue 34).

1. Expiring links, in the shape of a CloudFront signed URL behind an archive's data URL (as
   Earthdata's data URLs redirect to a presigned S3 URL): nginx's ``secure_link`` module checks
   each request's ``md5`` and ``expires`` query parameters and answers 403 once the link has
   expired, as CloudFront and S3 do; a small redirector on loopback answers each ask for the data
   URL with 302 to a fresh link valid for one second. ``--limit-rate`` makes the transfer outlive
   several links.
2. The same with moto's S3: the redirector hands out real presigned S3 URLs (SigV4,
   ``X-Amz-Expires=2``). moto (5.x) does not check a presigned URL's expiry, so the redirector's
   process also runs a thin gate in front of moto that answers S3's 403 ``AccessDenied`` "Request
   has expired" once ``X-Amz-Date + X-Amz-Expires`` has passed and passes every other request
   through to moto unchanged.
3. Mirrors that say no: nginx serves the tree as the primary and another nginx serves a copy
   lacking one file (404) and refusing two (403, 410); ``dtune get DIR --mirror DIR`` brings the
   whole tree byte-exact, exit 0, and the summary (``--json`` and the console) names each mirror
   dropped for a file and why.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self
from urllib.parse import parse_qs, urlsplit

import pytest
from support.harness import assert_exact, run_get
from support.realservers import Nginx, Unavailable, public_dir

pytestmark = pytest.mark.nginx

RNG = random.Random(3434)
MIB = 1 << 20
SECRET = "dtune-link-secret"
LIFETIME = 1  # seconds a link is valid


class Loopback:
    """A ``ThreadingHTTPServer`` on 127.0.0.1 in a thread, for the duration of a ``with``."""

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Redirector(Loopback):
    """``GET /<path>`` → 302 to ``make_link(path)``, a fresh link each time (``asked`` counts)."""

    def __init__(self, make_link: Callable[[str], str]) -> None:
        owner = self
        self.asked: dict[str, int] = {}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 -- http.server's name
                path = urlsplit(self.path).path
                owner.asked[path] = owner.asked.get(path, 0) + 1
                self.send_response(302)
                self.send_header("Location", make_link(path))
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_HEAD = do_GET  # noqa: N815 -- http.server's name

            def log_message(self, *args: object) -> None:
                pass

        self.serve(Handler)



# ---- 1. nginx secure_link ----------------------------------------------------------------------------
SECURE_LINK = f"""secure_link $arg_md5,$arg_expires;
            secure_link_md5 "$secure_link_expires$uri {SECRET}";
            if ($secure_link = "") {{ return 403; }}
            if ($secure_link = "0") {{ return 403; }}"""


def secure_link(base: str, path: str, lifetime: int = LIFETIME) -> str:
    """A link nginx's secure_link accepts until ``lifetime`` seconds from now (its documented md5)."""
    expires = int(time.time()) + lifetime
    digest = hashlib.md5(f"{expires}{path} {SECRET}".encode()).digest()
    md5 = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    return f"{base}{path}?md5={md5}&expires={expires}"


@pytest.fixture
def signed_nginx() -> Iterator[tuple[Nginx, Path]]:
    root = public_dir("dtune-test-expiring-")
    server = Nginx(root, location_extra=SECURE_LINK)
    try:
        server.start()
    except Unavailable as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(str(exc))
    yield server, root
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


def test_nginx_secure_link_refuses_an_expired_link(signed_nginx: tuple[Nginx, Path]) -> None:
    """The premise: a link works, the same link after its expiry is refused with 403."""
    server, root = signed_nginx
    (root / "x.bin").write_bytes(b"x" * 10)
    (root / "x.bin").chmod(0o644)
    link = urlsplit(secure_link(server.base, "/x.bin", lifetime=0))
    fresh = urlsplit(secure_link(server.base, "/x.bin", lifetime=60))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", f"{fresh.path}?{fresh.query}")
    assert conn.getresponse().read() == b"x" * 10
    time.sleep(1.1)
    conn.request("GET", f"{link.path}?{link.query}")
    reply = conn.getresponse()
    reply.read()
    assert reply.status == 403
    conn.close()


def test_an_expiring_signed_link_is_renewed_from_the_data_url_and_the_file_is_exact(
        signed_nginx: tuple[Nginx, Path], tmp_path: Path, env: dict[str, str]) -> None:
    """CloudFront signed URL shape (nginx secure_link, 403 once expired) behind a data URL that
    redirects to a fresh one each time, as Earthdata's do: 12 MiB at 3 MiB/s outlives a dozen
    one-second links; every expired range is asked again through the data URL."""
    server, root = signed_nginx
    data = RNG.randbytes(12 * MIB + 77)
    (root / "granule.nc").write_bytes(data)
    (root / "granule.nc").chmod(0o644)
    with Redirector(lambda path: secure_link(server.base, path)) as redirector:
        out = tmp_path / "out"
        done = run_get(env, [redirector.base + "/granule.nc"], out, "--limit-rate", "3M", "--retries", "3",
                       timeout=120)
    assert done.code == 0, done.stderr[-3000:]
    assert_exact(done, out, {"granule.nc": data})
    refused = [line for line in server.log() if line.status == 403]
    assert refused, "no link expired during the transfer: the test proves nothing"
    assert redirector.asked["/granule.nc"] > 2, redirector.asked   # discovery's, the first, renewals
    renewed = done.of("link_renewed")
    assert renewed and all(e["url"] == redirector.base + "/granule.nc" and e["status"] == 403
                           for e in renewed)
    assert done.summary["links_renewed"] == len(renewed) and done.summary["files_failed"] == 0


# ---- 2. moto's S3, presigned -------------------------------------------------------------------------
class ExpiryGate(Loopback):
    """A pass-through to moto that answers S3's 403 "Request has expired" once a presigned URL's
    ``X-Amz-Date + X-Amz-Expires`` has passed (moto does not check it)."""

    EXPIRED = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
               b"<Message>Request has expired</Message></Error>")

    def __init__(self, upstream_port: int) -> None:
        gate = self
        self.refused = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, method: str) -> None:
                query = parse_qs(urlsplit(self.path).query)
                signed = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
                if time.time() > signed.timestamp() + int(query["X-Amz-Expires"][0]):
                    gate.refused += 1
                    self.send_response(403)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(gate.EXPIRED)))
                    self.end_headers()
                    self.wfile.write(gate.EXPIRED if method == "GET" else b"")
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("range", "if-range", "host")}
                up = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
                try:
                    up.request(method, self.path, headers=headers)
                    reply = up.getresponse()
                    self.send_response(reply.status)
                    for name, value in reply.getheaders():
                        if name.lower() not in ("connection", "transfer-encoding", "keep-alive", "server",
                                                "date"):
                            self.send_header(name, value)
                    self.end_headers()
                    while chunk := reply.read(256 * 1024):
                        self.wfile.write(chunk)
                finally:
                    up.close()

            def do_GET(self) -> None:  # noqa: N802 -- http.server's name
                self._answer("GET")

            def do_HEAD(self) -> None:  # noqa: N802 -- http.server's name
                self._answer("HEAD")

            def log_message(self, *args: object) -> None:
                pass

        self.serve(Handler)



def test_a_presigned_s3_url_that_expires_is_renewed_and_the_object_is_exact(
        tmp_path: Path, env: dict[str, str]) -> None:
    """Earthdata's shape: a data URL redirecting to a presigned S3 URL (moto, SigV4, 2 s)."""
    from support.s3 import MotoS3  # (moto and boto3 are test-only and slow to import)

    try:
        moto = MotoS3(verify=False).start()
    except Unavailable as exc:
        pytest.skip(str(exc))
    try:
        client = moto.client()
        client.create_bucket(Bucket="dtune-granules")
        data = RNG.randbytes(12 * MIB + 5)   # 4 s at 3 MiB/s: a few links expire
        client.put_object(Bucket="dtune-granules", Key="g/granule.h5", Body=data)
        signatures: list[str] = []
        with ExpiryGate(moto.port) as gate:
            def presign(path: str) -> str:
                # (X-Amz-Date is in whole seconds: 2 s gives each link 1-2 s)
                url = client.generate_presigned_url("get_object", ExpiresIn=2,
                                                    Params={"Bucket": "dtune-granules", "Key": path.lstrip("/")})
                signatures.append(url.rsplit("X-Amz-Signature=", 1)[1].split("&")[0])
                return gate.base + url[len(moto.endpoint):]

            with Redirector(presign) as redirector:
                out = tmp_path / "out"
                done = run_get(env, [redirector.base + "/g/granule.h5"], out, "--limit-rate", "3M",
                               "--retries", "3", timeout=120)
    finally:
        moto.stop()
    assert done.code == 0, done.stderr[-3000:]
    assert_exact(done, out, {"granule.h5": data})
    assert gate.refused > 0, "no presigned URL expired during the transfer: the test proves nothing"
    assert redirector.asked["/g/granule.h5"] > 2, redirector.asked
    assert done.summary["links_renewed"] >= 1
    text = done.stdout + done.stderr
    assert signatures and not [sig for sig in signatures if sig in text]   # a signature is a credential
    assert all("X-Amz-Signature=REDACTED" in e["expired"] for e in done.of("link_renewed"))


# ---- 3. mirrors that say no --------------------------------------------------------------------------
REFUSING = """if ($uri = "/d/f2.bin") { return 403; }
            if ($uri = "/d/f3.bin") { return 410; }"""


@pytest.fixture
def mirrored() -> Iterator[tuple[Nginx, Nginx, dict[str, bytes]]]:
    # (larger than the split threshold, 2 MiB: each file's ranges go to both replicas)
    files = {f"d/f{i}.bin": RNG.randbytes(3 * MIB + i) for i in range(6)}
    roots = [public_dir("dtune-test-primary-"), public_dir("dtune-test-mirror-")]
    for root in roots:
        for rel, data in files.items():
            (root / rel).parent.mkdir(exist_ok=True, mode=0o755)
            (root / rel).write_bytes(data)
            (root / rel).chmod(0o644)
    (roots[1] / "d/f1.bin").unlink()   # the mirror lacks it: 404
    # the primary slower per connection, so that the mirror is asked for every file
    servers = [Nginx(roots[0], location_extra="limit_rate 4m;"), Nginx(roots[1], location_extra=REFUSING)]
    try:
        for s in servers:
            s.start()
    except Unavailable as exc:
        pytest.skip(str(exc))
    yield servers[0], servers[1], files
    for s in servers:
        s.stop()
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def test_a_mirror_that_lacks_or_refuses_files_is_dropped_for_them_and_the_tree_is_exact(
        mirrored: tuple[Nginx, Nginx, dict[str, bytes]], tmp_path: Path, env: dict[str, str]) -> None:
    primary, mirror, files = mirrored
    out = tmp_path / "out"
    done = run_get(env, [primary.base + "/d/"], out, "--mirror", mirror.base + "/d/", timeout=120)
    assert done.code == 0, done.stderr[-3000:]
    assert_exact(done, out, {rel[2:]: data for rel, data in files.items()})
    dropped = sorted((d["file"], d["url"], d["status"]) for d in done.summary["replicas_dropped"])
    refusing = {("f1.bin", 404), ("f2.bin", 403), ("f3.bin", 410)}
    # (a file the primary served whole before the mirror was asked for it needs no drop)
    assert dropped and {(name, status) for name, _, status in dropped} <= refusing, dropped
    assert all(url == f"{mirror.base}/d/{name}" for name, url, _ in dropped), dropped
    assert len(done.of("replica_dropped")) == len(dropped)
    assert not done.of("replica_paused")
    served = {line.uri for line in mirror.log() if line.status in (200, 206) and line.body_bytes}
    assert served and served <= {"/d/f0.bin", "/d/f4.bin", "/d/f5.bin"}, served   # still used for them


def test_the_console_summary_names_the_mirror_dropped(
        mirrored: tuple[Nginx, Nginx, dict[str, bytes]], tmp_path: Path, env: dict[str, str]) -> None:
    primary, mirror, files = mirrored
    out = tmp_path / "out"
    done = run_get(env, [primary.base + "/d/f1.bin"], out, "--mirror", mirror.base + "/d/f1.bin",
                   json_events=False, timeout=60)
    assert done.code == 0, done.stderr[-3000:]
    assert (out / "f1.bin").read_bytes() == files["d/f1.bin"]
    assert f"dtune: replica dropped for f1.bin: {mirror.base}/d/f1.bin: f1.bin: server answered 404" \
        in done.stderr, done.stderr
