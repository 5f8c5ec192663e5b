"""``dtune get`` through a real HTTP proxy (tinyproxy) and with its TLS trust options.

A tinyproxy per test (``support.proxy.Tinyproxy``: its own configuration and
log in ``tmp_path``, on a free loopback port) in front of ``dtune serve``
over plain http and over TLS (a test CA and a certificate for 127.0.0.1 from
``support.realservers.make_tls_files``). What went through the proxy is read
from tinyproxy's own log: one "Request" line per forwarded request (absolute
URL) or CONNECT (host:port).

What is checked: a file and a directory tree arrive byte-exact through the
proxy, from ``http_proxy`` and from ``--proxy``, with no retry although
tinyproxy ends each connection after one answer; NO_PROXY and ``--noproxy``
bypass it (its log stays empty, the origin sees no proxy credentials);
https goes through CONNECT and is trusted with ``--ca-certificate``, fails
with one clear line naming the origin and the certificate without it, and
goes through unchecked with ``--insecure``, which warns before anything is
fetched; a proxy with Basic authentication takes the credentials of the
proxy URL, and without them the failure says the proxy wants credentials
(407), which are never printed; an unreachable proxy fails at once with a
line naming it, one that never answers CONNECT times out naming it; one
tunnel carries several requests on either event loop; https and SOCKS
proxies are refused at start.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.fakeserver import FakeServer
from support.harness import assert_exact, child_env, run_get, tree
from support.proxy import Tinyproxy
from support.realservers import DtuneServe, TlsFiles, Unavailable, free_port, make_tls_files

from dtune.http import trust
from dtune.http.access import Access
from dtune.http.client import Fetcher
from dtune.http.proxy import route_from

pytestmark = pytest.mark.skipif(shutil.which("tinyproxy") is None and not os.path.exists("/usr/bin/tinyproxy"),
                                reason="tinyproxy is not installed (apt-get install tinyproxy)")

USER, PASSWORD = "dtune-user", "s3cret-pw_42"   # tinyproxy's BasicAuth takes [A-Za-z0-9_-]


@dataclass
class Site:
    root: Path
    files: dict[str, bytes]
    tls: TlsFiles
    http: DtuneServe
    https: DtuneServe

    @property
    def tls_port(self) -> int:
        return int(self.https.base.rstrip("/").rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("dtune-proxy-")
    root = base / "root"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (root / "small.txt").write_bytes(b"small\n")
    for i in range(30):  # enough files for a first wave of pipelines, which tinyproxy would break
        (root / "sub" / f"f{i}.bin").write_bytes(os.urandom(200_000 + i))
    (root / "sub" / "deeper" / "inner.txt").write_bytes(b"inner\n")
    try:
        tls = make_tls_files(base / "tls")
        http = DtuneServe(root).start()
    except Unavailable as exc:
        pytest.skip(str(exc))
    try:
        https = DtuneServe(root, "--tls-cert", str(tls.cert), "--tls-key", str(tls.key)).start()
    except Unavailable as exc:
        http.stop()
        pytest.skip(str(exc))
    try:
        yield Site(root, tree(root), tls, http, https)
    finally:
        https.close()
        http.close()
        shutil.rmtree(base, ignore_errors=True)


def start_proxy(directory: Path, **kwargs) -> Tinyproxy:
    try:
        return Tinyproxy(directory, **kwargs).start()
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def proxy(tmp_path: Path, site: Site) -> Iterator[Tinyproxy]:
    tp = start_proxy(tmp_path / "tinyproxy", connect_ports=(site.tls_port,))
    yield tp
    tp.stop()


@pytest.fixture
def auth_proxy(tmp_path: Path, site: Site) -> Iterator[Tinyproxy]:
    tp = start_proxy(tmp_path / "tinyproxy-auth", connect_ports=(site.tls_port,), basic_auth=(USER, PASSWORD))
    yield tp
    tp.stop()


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = child_env(tmp_path / "home", **extra)
    for name in ("http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY",
                 "SSL_CERT_FILE", "SSL_CERT_DIR"):
        if name not in extra:
            env.pop(name, None)
    return env


def with_userinfo(url: str, user: str = USER, password: str = PASSWORD) -> str:
    return url.replace("http://", f"http://{user}:{password}@")


# ---- plain http through the proxy ---------------------------------------------------------------------
def test_a_tree_through_http_proxy_from_the_environment(tmp_path: Path, site: Site, proxy: Tinyproxy) -> None:
    out = tmp_path / "out"
    done = run_get(env_for(tmp_path, http_proxy=proxy.url), [site.http.base + "/"], out, "--pp", "4")
    assert_exact(done, out, site.files)
    targets = [r.target for r in proxy.requests()]
    base = site.http.base.rstrip("/")
    assert all(t.startswith(base + "/") for t in targets), targets  # absolute form, every one
    assert {f"{base}/{rel}" for rel in site.files} <= set(targets)
    assert targets[0] == f"{base}/"  # the listing (dtune serve's manifest) came through it first
    # tinyproxy ends each connection after one answer without saying so: nothing is lost to it
    assert done.summary["retries"] == 0, done.of("retry")


def test_a_file_through_the_proxy_option(tmp_path: Path, site: Site, proxy: Tinyproxy) -> None:
    out = tmp_path / "out"
    done = run_get(env_for(tmp_path), [site.http.base + "/big.bin"], out, "--proxy", proxy.url, "-p", "4")
    assert_exact(done, out, {"big.bin": site.files["big.bin"]})
    gets = [r for r in proxy.requests() if r.target == site.http.base.rstrip("/") + "/big.bin"]
    assert len(gets) >= 2, proxy.requests()  # ranges of it, each through the proxy


def test_the_proxy_as_host_port_with_http_assumed(tmp_path: Path, site: Site, proxy: Tinyproxy) -> None:
    out = tmp_path / "out"
    done = run_get(env_for(tmp_path), [site.http.base + "/small.txt"], out,
                   "--proxy", f"127.0.0.1:{proxy.port}")
    assert_exact(done, out, {"small.txt": b"small\n"})
    assert proxy.requests()


# ---- bypassing it -------------------------------------------------------------------------------------
class HeaderRecorder(FakeServer):
    """A FakeServer that keeps the header names and the target of every request."""

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__(files)
        self.seen: list[tuple[str, set[str]]] = []

    async def answer(self, exchange) -> bool:
        self.seen.append((exchange.request.path, set(exchange.headers)))
        return await super().answer(exchange)


@pytest.mark.parametrize("how", ["NO_PROXY", "no_proxy", "--noproxy", "--noproxy *"])
def test_no_proxy_goes_direct_without_the_proxy_credentials(tmp_path: Path, proxy: Tinyproxy, how: str) -> None:
    origin = HeaderRecorder({"/data.bin": os.urandom(200_000)}).start()
    try:
        env = env_for(tmp_path, http_proxy=with_userinfo(proxy.url))
        extra: tuple[str, ...] = ()
        if how in ("NO_PROXY", "no_proxy"):
            env[how] = "localhost, 127.0.0.1"
        else:
            extra = ("--noproxy", "*" if how.endswith("*") else "127.0.0.1:" + str(origin.port))
        out = tmp_path / "out"
        done = run_get(env, [origin.url("/data.bin")], out, *extra)
        assert_exact(done, out, {"data.bin": origin.files["/data.bin"]})
    finally:
        origin.stop()
    assert proxy.requests() == []
    assert origin.seen and all(not path.startswith("http") and "proxy-authorization" not in names
                               for path, names in origin.seen), origin.seen
    assert PASSWORD not in done.stdout + done.stderr


def test_no_proxy_for_another_port_does_not_bypass(tmp_path: Path, site: Site, proxy: Tinyproxy) -> None:
    out = tmp_path / "out"
    done = run_get(env_for(tmp_path, http_proxy=proxy.url, no_proxy="127.0.0.1:1"),
                   [site.http.base + "/small.txt"], out)
    assert_exact(done, out, {"small.txt": b"small\n"})
    assert proxy.requests()


# ---- https through CONNECT ------------------------------------------------------------------------------
def test_https_through_connect_with_the_ca_certificate(tmp_path: Path, site: Site, proxy: Tinyproxy) -> None:
    out = tmp_path / "out"
    done = run_get(env_for(tmp_path, https_proxy=proxy.url), [site.https.base + "/"], out,
                   "--ca-certificate", str(site.tls.ca), "--pp", "4")
    assert_exact(done, out, site.files)
    requests = proxy.requests()
    assert requests and all(r == type(r)("CONNECT", f"127.0.0.1:{site.tls_port}") for r in requests), requests
    assert done.summary["retries"] == 0, done.of("retry")


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_one_tunnel_carries_several_requests_on_either_loop(site: Site, proxy: Tinyproxy, loop: str) -> None:
    runner = asyncio.run if loop == "asyncio" else pytest.importorskip("uvloop").run
    access = Access(route=route_from({"proxy": proxy.url}, {}),
                    ssl_context=trust.ssl_context_from({"ca_certificate": str(site.tls.ca)}))

    async def fetch_two() -> list[bytes]:
        fetcher = Fetcher(timeout=10, access=access)
        try:
            return [(await fetcher.fetch(site.https.base.rstrip("/") + path)).body
                    for path in ("/small.txt", "/sub/deeper/inner.txt")]
        finally:
            fetcher.close()

    assert runner(fetch_two()) == [b"small\n", b"inner\n"]
    assert [r.method for r in proxy.requests()] == ["CONNECT"]  # the second went in the same tunnel


def test_https_through_connect_from_https_proxy_upper_case_and_cacert(tmp_path: Path, site: Site,
                                                                      proxy: Tinyproxy) -> None:
    out = tmp_path / "out"
    done = run_get(env_for(tmp_path, HTTPS_PROXY=proxy.url), [site.https.base + "/big.bin"], out,
                   "--cacert", str(site.tls.ca))
    assert_exact(done, out, {"big.bin": site.files["big.bin"]})
    assert {r.method for r in proxy.requests()} == {"CONNECT"}


def test_an_untrusted_certificate_through_the_proxy_is_one_clear_line(tmp_path: Path, site: Site,
                                                                     proxy: Tinyproxy) -> None:
    out = tmp_path / "out"
    origin = site.https.base.rstrip("/")
    done = run_get(env_for(tmp_path, https_proxy=proxy.url), [origin + "/small.txt"], out,
                   "--retries", "5", json_events=False, timeout=30)
    assert done.code == 1, done.stderr
    lines = done.stderr_lines
    assert len(lines) == 1 and lines[0].startswith("dtune: "), lines
    assert origin in lines[0] and "certificate" in lines[0] and "--ca-certificate" in lines[0], lines[0]
    assert done.seconds < 10  # not retried: asking again cannot help
    assert not (out / "small.txt").exists()
    assert proxy.requests()  # it went through the tunnel before TLS refused it


def test_insecure_goes_through_and_warns_first(tmp_path: Path, site: Site, proxy: Tinyproxy) -> None:
    out = tmp_path / "out"
    done = run_get(env_for(tmp_path, https_proxy=proxy.url), [site.https.base + "/"], out, "-k")
    assert_exact(done, out, site.files)
    first = done.events[0]
    assert first["event"] == "warning" and "not checked" in first["reason"] and "--insecure" in first["reason"]
    plain = run_get(env_for(tmp_path, https_proxy=proxy.url), [site.https.base + "/small.txt"],
                    tmp_path / "plain", "--insecure", json_events=False)
    assert plain.code == 0, plain.stderr
    assert any("not checked" in line for line in plain.stderr_lines), plain.stderr


def test_insecure_direct_too(tmp_path: Path, site: Site) -> None:
    out = tmp_path / "out"
    done = run_get(env_for(tmp_path), [site.https.base + "/small.txt"], out, "--insecure")
    assert_exact(done, out, {"small.txt": b"small\n"})
    assert done.events[0]["event"] == "warning"


# ---- proxy credentials ----------------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_proxy_credentials_from_the_proxy_url(tmp_path: Path, site: Site, auth_proxy: Tinyproxy,
                                              scheme: str) -> None:
    source = (site.http if scheme == "http" else site.https).base + "/"
    out = tmp_path / "out"
    done = run_get(env_for(tmp_path, **{f"{scheme}_proxy": with_userinfo(auth_proxy.url)}), [source], out,
                   "--cacert", str(site.tls.ca))
    assert_exact(done, out, site.files)
    assert auth_proxy.requests()
    assert PASSWORD not in done.stdout + done.stderr


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_no_proxy_credentials_is_a_407_that_says_so(tmp_path: Path, site: Site, auth_proxy: Tinyproxy,
                                                    scheme: str) -> None:
    source = (site.http if scheme == "http" else site.https).base + "/"
    done = run_get(env_for(tmp_path), [source], tmp_path / "out", "--proxy", auth_proxy.url,
                   "--cacert", str(site.tls.ca), json_events=False, timeout=30)
    assert done.code == 1, done.stderr
    line = done.stderr_lines[-1]
    assert "407" in line and f"proxy {auth_proxy.url} wants credentials" in line, line
    assert done.seconds < 10


def test_wrong_proxy_credentials_are_refused_and_never_printed(tmp_path: Path, site: Site,
                                                               auth_proxy: Tinyproxy) -> None:
    wrong = "not-the-pw_7"
    done = run_get(env_for(tmp_path), [site.https.base + "/small.txt"], tmp_path / "out",
                   "--proxy", with_userinfo(auth_proxy.url, USER, wrong), "--cacert", str(site.tls.ca),
                   json_events=False, timeout=30)
    assert done.code == 1, done.stderr
    assert f"proxy {auth_proxy.url} refused the credentials" in done.stderr, done.stderr
    assert wrong not in done.stderr + done.stdout and USER not in done.stderr


# ---- a proxy that is not there, or not one dtune speaks ------------------------------------------------------
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_an_unreachable_proxy_fails_fast_naming_it(tmp_path: Path, site: Site, scheme: str) -> None:
    port = free_port()  # nothing listens there
    source = (site.http if scheme == "http" else site.https).base + "/small.txt"
    done = run_get(env_for(tmp_path), [source], tmp_path / "out",
                   "--proxy", f"http://{USER}:{PASSWORD}@127.0.0.1:{port}", json_events=False, timeout=30)
    assert done.code == 1, done.stderr
    assert f"cannot connect to proxy http://127.0.0.1:{port}" in done.stderr, done.stderr
    assert PASSWORD not in done.stderr and done.seconds < 10


def test_a_proxy_that_never_answers_connect_times_out_naming_it(tmp_path: Path, site: Site) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens (the kernel accepts), never reads
        port = silent.getsockname()[1]
        done = run_get(env_for(tmp_path), [site.https.base + "/small.txt"], tmp_path / "out",
                       "--proxy", f"127.0.0.1:{port}", json_events=False, timeout=30)
    assert done.code == 1, done.stderr
    assert f"CONNECT through proxy http://127.0.0.1:{port} timed out after" in done.stderr, done.stderr


@pytest.mark.parametrize(("where", "value", "words"), [
    ("--proxy", "socks5://127.0.0.1:1080", "socks5:// proxies are not supported"),
    ("https_proxy", f"https://{USER}:{PASSWORD}@127.0.0.1:3128", "https_proxy: https:// (TLS to the proxy)"),
    ("all_proxy", "socks5h://127.0.0.1:1080", "all_proxy: socks5h:// proxies are not supported"),
])
def test_unsupported_proxies_are_refused_at_start(tmp_path: Path, site: Site, where: str, value: str,
                                                  words: str) -> None:
    if where == "--proxy":
        done = run_get(env_for(tmp_path), [site.http.base + "/small.txt"], tmp_path / "out", where, value,
                       json_events=False)
    else:
        done = run_get(env_for(tmp_path, **{where: value}), [site.http.base + "/small.txt"], tmp_path / "out",
                       json_events=False)
    assert done.code == 2, done.stderr
    assert words in done.stderr and PASSWORD not in done.stderr
    assert not (tmp_path / "out" / "small.txt").exists()


def test_a_bad_ca_file_is_a_usage_error(tmp_path: Path, site: Site) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("no certificate here\n")
    done = run_get(env_for(tmp_path), [site.https.base + "/small.txt"], tmp_path / "out",
                   "--ca-certificate", str(junk), json_events=False)
    assert done.code == 2 and f"--ca-certificate {junk}: no PEM certificate" in done.stderr, done.stderr
