"""``dtune serve --tls-cert/--tls-key``: HTTPS from a real server process on 127.0.0.1, real clients.

The certificates are made at test time (``support.realservers.make_tls_files``:
a test CA and a server certificate for 127.0.0.1, with the ``openssl``
command, else the ``cryptography`` package). curl trusts the CA with
``--cacert``; ``dtune get`` trusts it through ``SSL_CERT_FILE`` (its TLS
context is the stdlib's default one).

What is checked: files, ranges, manifests and listings arrive byte-exact
over TLS on both event loops; a body larger than the server's memory
budget streams through TLS in bounded memory even to a slow reader (no
sendfile under TLS); TLS below 1.2 and non-AEAD suites are refused; an
untrusted client, plain HTTP on the TLS port and a client that never
finishes its handshake cost the server nothing and print nothing; every
bad certificate or key is one ``dtune:`` line and exit status 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.rawhttp import connect, read_until_closed, request, status_of
from support.realservers import DtuneServe, TlsFiles, Unavailable, make_tls_files

from dtune.server import ServerConfig, ServerThread

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")

SMALL = os.urandom(1000)
BIG = os.urandom(3 * 1024 * 1024 + 17)      # above inline_body_max: streamed in tls_piece pieces
HUGE_MIB = 32                                 # the bounded-memory body
HUGE_RATE = "16M"                             # curl --limit-rate: the slow reader takes ~2 s
MEMORY_BOUND_KIB = 12 * 1024                  # peak RSS growth allowed while streaming HUGE_MIB


@dataclass
class Site:
    files: TlsFiles
    root: Path
    huge_sha256: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("dtune-serve-tls-")
    try:
        files = make_tls_files(base / "tls")
    except Unavailable as exc:
        pytest.skip(str(exc))
    root = base / "root"
    (root / "sub").mkdir(parents=True)
    (root / "small.txt").write_bytes(SMALL)
    (root / "big.bin").write_bytes(BIG)
    (root / "sub" / "inner.txt").write_bytes(b"inner\n")
    digest = hashlib.sha256()
    with open(base / "huge.bin", "wb") as f:
        for _ in range(HUGE_MIB):
            chunk = os.urandom(1 << 20)
            digest.update(chunk)
            f.write(chunk)
    yield Site(files, root, digest.hexdigest())
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module", params=["uvloop", "asyncio"])
def server(request: pytest.FixtureRequest, site: Site) -> Iterator[DtuneServe]:
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    try:
        with DtuneServe(site.root, "--tls-cert", str(site.files.cert), "--tls-key", str(site.files.key),
                        "--loop", request.param) as serve:
            yield serve
            err = serve.stderr()  # --quiet: nothing at all, not even a warning from the TLS layer
            assert err == "", err[-2000:]
    except Unavailable as exc:
        pytest.fail(str(exc))


def curl(site: Site, url: str, *args: str, trust: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    cmd = ["curl", "-sS", "--noproxy", "*", "--max-time", str(timeout)]
    if trust:
        cmd += ["--cacert", str(site.files.ca)]
    return subprocess.run([*cmd, *args, url], capture_output=True, timeout=timeout + 10)


def test_the_serving_line_says_https_and_the_process_helper_reads_it(server: DtuneServe) -> None:
    assert server.url.startswith("https://127.0.0.1:") and server.url.endswith("/")
    assert server.port > 0 and server.origin == server.url.removesuffix("/")


FILES = {"small.txt": SMALL, "big.bin": BIG, "sub/inner.txt": b"inner\n"}


@pytest.mark.parametrize("path", list(FILES))
def test_curl_gets_each_file_byte_exact_over_tls(server: DtuneServe, site: Site, path: str) -> None:
    expected = FILES[path]
    done = curl(site, server.url + path, "-w", "\n%{http_code} %{ssl_verify_result}")
    body, _, tail = done.stdout.rpartition(b"\n")
    assert done.returncode == 0, done.stderr
    assert tail == b"200 0" and body == expected


def test_curl_gets_ranges_over_tls(server: DtuneServe, site: Site) -> None:
    for first, last in [(0, 0), (1000, 2_000_999), (len(BIG) - 10, len(BIG) - 1)]:
        done = curl(site, server.url + "big.bin", "-r", f"{first}-{last}", "-w", "\n%{http_code}")
        body, _, code = done.stdout.rpartition(b"\n")
        assert done.returncode == 0 and code == b"206", done.stderr
        assert body == BIG[first:last + 1]


def test_the_manifest_and_the_listing_come_over_tls(server: DtuneServe, site: Site) -> None:
    manifest = json.loads(curl(site, server.url + "?manifest").stdout)
    assert {f["path"]: f["size"] for f in manifest["files"]} == {
        "big.bin": len(BIG), "small.txt": len(SMALL), "sub/inner.txt": 6}
    listing = curl(site, server.url).stdout
    assert b'href="big.bin"' in listing and b'href="sub/"' in listing


def test_a_large_body_streams_through_tls_in_bounded_memory_to_a_slow_reader(
        server: DtuneServe, site: Site, tmp_path: Path, record_property) -> None:  # type: ignore[no-untyped-def]
    # sendfile cannot serve TLS: the server reads and writes pieces as the client takes them, so a
    # body never sits in memory whole (were it read ahead, the slow reader would make it all pile up)
    huge = site.root / "huge.bin"
    shutil.copyfile(huge.parent.parent / "huge.bin", huge)  # only this test serves it
    try:
        assert curl(site, server.url + "big.bin", "-o", os.devnull).returncode == 0  # warm-up: TLS buffers
        baseline = server.peak_rss_kib()
        out = tmp_path / "huge.out"
        t0 = time.monotonic()
        done = curl(site, server.url + "huge.bin", "--limit-rate", HUGE_RATE, "-o", str(out))
        took = time.monotonic() - t0
        grew = server.peak_rss_kib() - baseline
    finally:
        huge.unlink()
    summary = f"{HUGE_MIB} MiB at {HUGE_RATE}/s in {took:.1f} s, server peak RSS +{grew} KiB"
    print(summary)
    record_property("observed", summary)
    assert done.returncode == 0, done.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == site.huge_sha256
    assert grew <= MEMORY_BOUND_KIB, f"peak RSS grew by {grew} KiB streaming {HUGE_MIB} MiB"


def test_dtune_get_fetches_the_tree_over_https_trusting_the_test_ca(
        server: DtuneServe, site: Site, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "SSL_CERT_FILE": str(site.files.ca), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    done = subprocess.run([sys.executable, "-m", "dtune", "get", server.url, "-o", str(out), "--no-progress",
                           "--no-history"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "small.txt").read_bytes() == SMALL and (out / "big.bin").read_bytes() == BIG
    assert (out / "sub" / "inner.txt").read_bytes() == b"inner\n"


def test_tls_below_1_2_and_suites_without_forward_secrecy_or_aead_are_refused(server: DtuneServe, site: Site) -> None:
    url = server.url + "small.txt"
    assert curl(site, url, "--tlsv1.2", "--tls-max", "1.2").stdout == SMALL  # TLS 1.2 itself works
    old = curl(site, url, "--tlsv1.1", "--tls-max", "1.1", "--ciphers", "DEFAULT@SECLEVEL=0")
    assert old.returncode == 35 and not old.stdout, old.stderr          # 35: the TLS handshake failed
    for suites in ("AES128-SHA:AES256-GCM-SHA384", "ECDHE-RSA-AES128-SHA:ECDHE-ECDSA-AES128-SHA"):
        weak = curl(site, url, "--tlsv1.2", "--tls-max", "1.2", "--ciphers", suites)
        assert weak.returncode == 35 and not weak.stdout, (suites, weak.stderr)


def test_an_untrusting_client_and_plain_http_on_the_tls_port_get_nothing_and_the_server_carries_on(
        server: DtuneServe, site: Site) -> None:
    untrusted = curl(site, server.url + "small.txt", trust=False)
    assert untrusted.returncode == 60 and not untrusted.stdout  # 60: the peer's certificate was not trusted
    with connect(server.port) as sock:
        sock.sendall(request("/small.txt"))
        data, closed = read_until_closed(sock, 5)
    assert closed and status_of(data) == 0 and SMALL not in data
    assert curl(site, server.url + "small.txt").stdout == SMALL
    assert server.alive()


# ---- the TLS deadlines, on an in-process server with short timeouts ------------------------------------
@pytest.fixture(params=["uvloop", "asyncio"])
def quick_server(request: pytest.FixtureRequest, site: Site) -> Iterator[ServerThread]:
    if request.param == "uvloop":
        pytest.importorskip("uvloop")
    root = site.root.parent / "quick"
    root.mkdir(exist_ok=True)
    with open(root / "stall.bin", "wb") as f:
        f.truncate(48 << 20)
    cfg = ServerConfig(root=root, port=0, quiet=True, loop=request.param, tls_cert=site.files.cert,
                       tls_key=site.files.key, tls_handshake_timeout=0.5, send_timeout=0.5, header_timeout=5)
    with ServerThread(cfg) as srv:
        yield srv
    shutil.rmtree(root)


@pytest.mark.parametrize("sent", [b"", b"\x16\x03\x01\x00"], ids=["silent", "half a ClientHello"])
def test_a_client_that_does_not_finish_its_handshake_is_cut_at_the_handshake_deadline(
        quick_server: ServerThread, sent: bytes) -> None:
    with connect(quick_server.port) as sock:
        sock.sendall(sent)
        t0 = time.monotonic()
        _, closed = read_until_closed(sock, 5)
        took = time.monotonic() - t0
    assert closed and 0.3 < took < 3, took


def test_a_tls_client_that_stops_reading_is_cut_after_the_send_deadline(quick_server: ServerThread, site: Site) -> None:
    ctx = ssl.create_default_context(cafile=str(site.files.ca))
    raw = socket.create_connection(("127.0.0.1", quick_server.port), timeout=10)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(request("/stall.bin"))
        t0 = time.monotonic()
        time.sleep(2.0)  # never read: the server's buffers fill, then it must give up (after 0.5 s)
        got = 0
        try:
            while chunk := tls.recv(1 << 20):
                got += len(chunk)
        except (ConnectionResetError, ssl.SSLError):
            pass  # reset (uvloop and asyncio differ in how the cut reaches the client)
        took = time.monotonic() - t0
    assert got < 48 << 20 and took < 5, (got, took)  # the rest of what it had queued was dropped
    stats = quick_server.server.stats  # type: ignore[union-attr]
    assert stats.cut == 1 and stats.requests == 0  # the answer was cut short, never completed


# ---- bad certificates and keys: one line, exit status 2 -------------------------------------------------
BAD_FLAGS = [
    ("missing certificate", ["--tls-cert", "{dir}/nope.pem", "--tls-key", "{key}"], "--tls-cert {dir}/nope.pem: no such file"),
    ("key of another certificate", ["--tls-cert", "{cert}", "--tls-key", "{other}"], "does not belong to the certificate"),
    ("key without certificate", ["--tls-key", "{key}"], "--tls-key needs --tls-cert"),
    ("certificate without a key", ["--tls-cert", "{cert}"], "no private key in it"),
    ("not PEM", ["--tls-cert", "{root}/small.txt", "--tls-key", "{key}"], "no PEM certificate in it"),
]


@pytest.mark.parametrize(("what", "flags", "message"), BAD_FLAGS, ids=[b[0] for b in BAD_FLAGS])
def test_a_bad_certificate_or_key_is_one_dtune_line_and_exit_status_2(
        site: Site, what: str, flags: list[str], message: str) -> None:
    names = {"dir": site.files.dir, "cert": site.files.cert, "key": site.files.key, "other": site.files.other_key,
             "root": site.root}
    args = [f.format(**names) for f in flags]
    done = subprocess.run([sys.executable, "-m", "dtune", "serve", str(site.root), "--port", "0", *args],
                          capture_output=True, text=True, timeout=30)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("dtune: ") and message.format(**names) in lines[0], lines
    assert done.stdout == ""  # never got as far as the serving line
