"""``dtune.http.proxy`` and ``dtune.http.trust`` on plain data: which proxy the environment and
the options choose, NO_PROXY matching, proxy URLs, the CONNECT exchange's bytes, what a proxied
request looks like, what a proxy's habits teach a connection, and the TLS contexts.

The same code against a real tinyproxy is ``tests/net/test_proxy_real.py``.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.realservers import make_tls_files
from support.recorder import Recorder, response

from dtune.config import resolve
from dtune.errors import HTTPError, ProtocolError, UsageError
from dtune.http import trust
from dtune.http.access import Access
from dtune.http.connection import ConnectionClosed, Unreachable
from dtune.http.message import Origin
from dtune.http.proxy import (
    ConnectReply,
    NoProxy,
    ProxiedConnection,
    Proxy,
    ProxyHabits,
    ProxyRoute,
    check_proxy_text,
    connect_request,
    parse_connect_reply,
    parse_proxy,
    proxy_variable,
    route_from,
)
from dtune.options import OPTIONS
from dtune.transfer import request_from

HTTP = Origin("http", "data.example.org", 80)
HTTPS = Origin("https", "data.example.org", 443)
PROXY = Proxy("proxy.lan", 3128)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# ---- proxy URLs ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "host", "port"), [
    ("http://proxy.lan:3128", "proxy.lan", 3128),
    ("proxy.lan:3128", "proxy.lan", 3128),        # http assumed
    ("HTTP://Proxy.LAN:8080/", "proxy.lan", 8080),
    ("http://proxy.lan", "proxy.lan", 1080),       # curl's default proxy port
    ("http://[::1]:3128", "::1", 3128),
    (" 10.0.0.1:3128 ", "10.0.0.1", 3128),
])
def test_proxy_url_forms(text: str, host: str, port: int) -> None:
    proxy = parse_proxy(text, "--proxy")
    assert (proxy.host, proxy.port, proxy.authorization) == (host, port, None)


def test_userinfo_becomes_a_basic_header_and_is_never_shown() -> None:
    proxy = parse_proxy("http://al%20ice:p%40ss%3Aword@proxy.lan:3128", "--proxy")
    assert proxy.authorization == basic("al ice", "p@ss:word")
    assert str(proxy) == "http://proxy.lan:3128"
    assert "p@ss" not in repr(proxy) and "ice" not in repr(proxy)
    assert str(Proxy("::1", 3128)) == "http://[::1]:3128"


@pytest.mark.parametrize(("text", "words"), [
    ("https://user:s3cret@proxy.lan:3128", "https:// (TLS to the proxy) proxies are not supported"),
    ("socks5://user:s3cret@proxy.lan:1080", "socks5:// proxies are not supported"),
    ("socks5h://proxy.lan:1080", "socks5h:// proxies are not supported"),
    ("", "empty proxy URL"),
    ("http://user:s3cret@proxy.lan:3128/path", "without a path"),
    ("http://user:s3cret@proxy.lan:99999", "bad port"),
    ("http://user:s3cret@:3128", "no host"),
    ("http://proxy.lan:3128\r\nX: s3cret", "control character"),
])
def test_bad_proxy_urls_are_usage_errors_that_do_not_repeat_the_password(text: str, words: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_proxy(text, "https_proxy")
    assert str(err.value).startswith("https_proxy: ") and words in str(err.value)
    assert "s3cret" not in str(err.value)


def test_the_option_parse_keeps_the_text_or_raises_value_error() -> None:
    assert check_proxy_text("proxy.lan:3128") == "proxy.lan:3128"
    with pytest.raises(ValueError, match="^socks5:// proxies are not supported"):
        check_proxy_text("socks5://proxy.lan")


# ---- the environment, as curl reads it -------------------------------------------------------------
def test_upper_case_http_proxy_is_never_read() -> None:
    assert proxy_variable({"HTTP_PROXY": "http://evil:1"}, "http") is None
    assert route_from({}, {"HTTP_PROXY": "http://evil:1"}) is None


@pytest.mark.parametrize(("env", "scheme", "want"), [
    ({"http_proxy": "a:1", "all_proxy": "b:1"}, "http", ("http_proxy", "a:1")),
    ({"all_proxy": "b:1", "ALL_PROXY": "c:1"}, "http", ("all_proxy", "b:1")),  # lower case wins
    ({"ALL_PROXY": "c:1"}, "http", ("ALL_PROXY", "c:1")),
    ({"https_proxy": "a:1", "HTTPS_PROXY": "b:1"}, "https", ("https_proxy", "a:1")),
    ({"HTTPS_PROXY": "b:1", "all_proxy": "c:1"}, "https", ("HTTPS_PROXY", "b:1")),
    ({"http_proxy": "a:1", "ALL_PROXY": "c:1"}, "https", ("ALL_PROXY", "c:1")),  # http_proxy is http's
    ({"http_proxy": "", "all_proxy": "c:1"}, "http", ("http_proxy", "")),  # set to nothing still counts
    ({}, "https", None),
])
def test_which_variable_a_scheme_reads(env: dict, scheme: str, want: tuple | None) -> None:
    assert proxy_variable(env, scheme) == want


def test_route_from_the_environment_per_scheme() -> None:
    route = route_from({}, {"http_proxy": "http://p1:3128", "HTTPS_PROXY": "p2:8080"})
    assert isinstance(route, ProxyRoute)
    assert route.proxy_for(HTTP) == Proxy("p1", 3128)
    assert route.proxy_for(HTTPS) == Proxy("p2", 8080)


def test_a_variable_set_to_nothing_means_direct_for_its_scheme() -> None:
    route = route_from({}, {"http_proxy": "", "all_proxy": "p:3128"})
    assert route is not None and not route.proxied(HTTP) and route.proxied(HTTPS)
    assert route_from({}, {"http_proxy": " ", "https_proxy": ""}) is None


def test_the_option_overrides_every_variable() -> None:
    route = route_from({"proxy": "http://u:pw@opt:1"}, {"http_proxy": "env:2", "https_proxy": "env:3"})
    assert route.proxy_for(HTTP) == route.proxy_for(HTTPS) == Proxy("opt", 1, basic("u", "pw"))


def test_an_unsupported_proxy_variable_is_a_usage_error_with_a_way_out() -> None:
    with pytest.raises(UsageError, match=r"^all_proxy: socks5:// proxies are not supported.*--noproxy '\*'"):
        route_from({}, {"all_proxy": "socks5://p:1080"})
    assert route_from({"noproxy": "*"}, {"all_proxy": "socks5://p:1080"}) is None


def test_noproxy_star_turns_even_the_option_off() -> None:
    assert route_from({"proxy": "p:1", "noproxy": "*"}, {}) is None
    assert route_from({"proxy": "p:1"}, {"NO_PROXY": "*"}) is None


def test_no_proxy_applies_to_the_option_too_and_the_option_beats_the_variables() -> None:
    route = route_from({"proxy": "p:1"}, {"no_proxy": "example.org"})
    assert not route.proxied(HTTP)
    route = route_from({"proxy": "p:1", "noproxy": "other.net"}, {"no_proxy": "example.org"})
    assert route.proxied(HTTP)
    # lower case wins over upper case
    route = route_from({"proxy": "p:1"}, {"no_proxy": "other.net", "NO_PROXY": "example.org"})
    assert route.proxied(HTTP)


# ---- NO_PROXY matching -----------------------------------------------------------------------------
@pytest.mark.parametrize(("entries", "host", "port", "direct"), [
    ("example.org", "example.org", 80, True),
    ("example.org", "data.example.org", 80, True),
    ("example.org", "notexample.org", 80, False),
    (".example.org", "data.example.org", 80, True),
    (".example.org", "example.org", 80, True),          # as curl: the leading dot is optional
    ("EXAMPLE.org.", "Data.Example.ORG.", 80, True),
    ("a.test, example.org ,b.test", "x.example.org", 443, True),
    ("a.test b.test", "b.test", 80, True),               # blanks separate too
    ("example.org:8080", "example.org", 8080, True),
    ("example.org:8080", "example.org", 80, False),
    ("10.0.0.1", "10.0.0.1", 80, True),
    ("10.0.0.1", "10.0.0.2", 80, False),
    ("10.0.0.0/8", "10.200.3.4", 80, True),
    ("10.0.0.0/8", "11.0.0.1", 80, False),
    ("192.168.1.5:8000", "192.168.1.5", 8000, True),
    ("192.168.1.5:8000", "192.168.1.5", 80, False),
    ("::1", "::1", 80, True),
    ("[::1]", "::1", 80, True),
    ("[::1]:8080", "::1", 8080, True),
    ("[::1]:8080", "::1", 80, False),
    ("fd00::/8", "fd12::5", 80, True),
    ("10.0.0.1", "example.org", 80, False),              # an address entry matches addresses only
    ("0.1", "10.0.0.1", 80, False),                      # no text suffix match on addresses
    ("*", "anything.example", 1, True),
    ("", "example.org", 80, False),
    (",,", "example.org", 80, False),
])
def test_no_proxy_matching(entries: str, host: str, port: int, direct: bool) -> None:
    assert NoProxy.parse(entries).matches(host, port) is direct


# ---- what a request through the route looks like ------------------------------------------------------
def test_a_proxied_http_request_is_absolute_form_with_proxy_authorization() -> None:
    access = Access(route=route_from({"proxy": "http://u:pw@p:3128"}, {}))
    head = access.request("GET", HTTP, "/a/b.bin?x=1", (0, 10)).decode()
    assert head.startswith("GET http://data.example.org/a/b.bin?x=1 HTTP/1.1\r\n")
    assert f"\r\nProxy-Authorization: {basic('u', 'pw')}\r\n" in head
    assert "\r\nHost: data.example.org\r\n" in head and "\r\nRange: bytes=0-9\r\n" in head


def test_https_requests_go_in_the_tunnel_without_the_proxy_credentials() -> None:
    access = Access(route=route_from({"proxy": "http://u:pw@p:3128"}, {}))
    head = access.request("GET", HTTPS, "/a").decode()
    assert head.startswith("GET /a HTTP/1.1\r\n") and "Proxy-Authorization" not in head


def test_a_bypassed_origin_gets_neither_absolute_form_nor_credentials() -> None:
    access = Access(route=route_from({"proxy": "http://u:pw@p:3128", "noproxy": "example.org"}, {}))
    head = access.request("GET", HTTP, "/a").decode()
    assert head.startswith("GET /a HTTP/1.1\r\n") and "Proxy-Authorization" not in head


def test_a_proxy_without_credentials_adds_no_header_and_the_caller_extra_is_kept() -> None:
    access = Access(route=route_from({"proxy": "p:3128"}, {}))
    head = access.request("GET", HTTP, "/a", extra={"X-One": "1"}).decode()
    assert "Proxy-Authorization" not in head and "\r\nX-One: 1\r\n" in head


def test_the_route_decides_once_per_origin() -> None:
    route = route_from({"proxy": "p:3128", "noproxy": "example.org"}, {})
    calls = []
    real = route.no_proxy.matches
    object.__setattr__(route, "no_proxy", type("Spy", (), {
        "matches": lambda self, host, port: calls.append(host) or real(host, port)})())
    for _ in range(5):
        route.proxied(HTTP)
        route.proxy_headers(HTTP)
    assert calls == ["data.example.org"]


# ---- CONNECT ---------------------------------------------------------------------------------------
def test_connect_request_bytes() -> None:
    req = connect_request(Origin("https", "::1", 8443), Proxy("p", 1, basic("u", "pw"))).decode()
    assert req.startswith("CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n")
    assert f"\r\nProxy-Authorization: {basic('u', 'pw')}\r\n" in req and req.endswith("\r\n\r\n")
    assert "Proxy-Authorization" not in connect_request(HTTPS, PROXY).decode()
    assert connect_request(HTTPS, PROXY).startswith(b"CONNECT data.example.org:443 HTTP/1.1\r\n")


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 Connection established\r\n\r\n",
                                  b"HTTP/1.0 200\r\nProxy-agent: x\r\n\r\n"])
def test_a_2xx_answer_opens_the_tunnel(head: bytes) -> None:
    parse_connect_reply(head, HTTPS, PROXY)


def test_a_407_says_credentials_are_wanted_or_refused() -> None:
    with pytest.raises(HTTPError) as err:
        parse_connect_reply(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n", HTTPS, PROXY)
    assert err.value.status == 407 and not err.value.retryable
    assert str(err.value) == (f"{HTTPS}: proxy http://proxy.lan:3128 wants credentials (give them in the proxy "
                              f"URL: http://USER:PASSWORD@HOST:PORT) (407 Proxy Authentication Required)")
    with_auth = Proxy("proxy.lan", 3128, basic("u", "s3cret"))
    with pytest.raises(HTTPError, match="refused the credentials of the proxy URL") as err:
        parse_connect_reply(b"HTTP/1.1 401 Unauthorized\r\n\r\n", HTTPS, with_auth)
    assert "s3cret" not in str(err.value) and "Basic" not in str(err.value)


def test_a_proxy_that_cannot_reach_the_origin_is_unreachable_and_retryable() -> None:
    with pytest.raises(Unreachable, match=r"proxy http://proxy.lan:3128 could not reach it \(502 Bad Gateway\)"):
        parse_connect_reply(b"HTTP/1.1 502 Bad Gateway\r\n\r\n", HTTPS, PROXY)


def test_a_refused_connect_is_final_and_names_the_status() -> None:
    with pytest.raises(HTTPError, match=r"refused to CONNECT \(403 Access violation\)") as err:
        parse_connect_reply(b"HTTP/1.0 403 Access violation\r\n\r\n", HTTPS, PROXY)
    assert not err.value.retryable and not isinstance(err.value, Unreachable)


@pytest.mark.parametrize("head", [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 2000 OK\r\n\r\n", b"\r\n\r\n",
                                  b"HTTP/2 200\r\n\r\n"])
def test_a_non_http_answer_is_a_protocol_error(head: bytes) -> None:
    with pytest.raises(ProtocolError, match="sent no HTTP answer to CONNECT"):
        parse_connect_reply(head, HTTPS, PROXY)


def test_the_reason_phrase_is_cut_and_made_printable() -> None:
    with pytest.raises(HTTPError) as err:
        parse_connect_reply(b"HTTP/1.1 403 " + b"\x1b[31m" + b"x" * 500 + b"\r\n\r\n", HTTPS, PROXY)
    assert "\x1b" not in str(err.value) and len(str(err.value)) < 200


class Transport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.paused = self.aborted = self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def pause_reading(self) -> None:
        self.paused = True

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.aborted or self.closed

    def get_extra_info(self, name: str) -> None:
        return None


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()  # never run: futures only
    yield loop
    loop.close()


def test_the_connect_answer_is_read_to_its_blank_line_then_reading_stops(loop) -> None:
    reply, tr = ConnectReply(loop, HTTPS, PROXY), Transport()
    reply.connection_made(tr)
    reply.data_received(b"HTTP/1.1 200 OK\r\n")
    assert not reply.head.done()
    reply.data_received(b"\r\n")
    assert reply.head.result() == b"HTTP/1.1 200 OK\r\n\r\n" and tr.paused


def test_an_endless_connect_answer_is_refused(loop) -> None:
    reply, tr = ConnectReply(loop, HTTPS, PROXY), Transport()
    reply.connection_made(tr)
    for _ in range(20):
        reply.data_received(b"X-Filler: " + b"a" * 1000 + b"\r\n")
    assert isinstance(reply.head.exception(), ProtocolError) and tr.aborted


def test_a_proxy_that_hangs_up_before_answering_connect_is_unreachable(loop) -> None:
    reply = ConnectReply(loop, HTTPS, PROXY)
    reply.connection_made(Transport())
    reply.connection_lost(None)
    assert isinstance(reply.head.exception(), Unreachable)
    assert "closed the connection before answering CONNECT" in str(reply.head.exception())


# ---- a proxy's habits: plain http through it ------------------------------------------------------------
def proxied(loop, habits: ProxyHabits, proxy: Proxy = PROXY) -> tuple[ProxiedConnection, Transport]:
    conn, tr = ProxiedConnection(HTTP, loop, proxy, habits), Transport()
    conn.connection_made(tr)  # type: ignore[arg-type]
    return conn, tr


def test_a_proxied_connection_carries_one_request_at_a_time(loop) -> None:
    conn, _ = proxied(loop, ProxyHabits())
    assert conn.one_at_a_time


def test_a_proxy_that_hangs_up_after_one_answer_is_learnt_and_costs_nothing(loop) -> None:
    habits = ProxyHabits()
    conn, _ = proxied(loop, habits)
    first, second, third = Recorder("/a"), Recorder("/b"), Recorder("/c")
    for r in (first, second, third):
        conn.send(r)
    conn.data_received(response(b"hello"))          # no Connection: close, and then EOF
    assert first.outcome == "complete" and conn.usable
    conn.connection_lost(None)
    assert habits.one_answer and conn.server_closes
    for r in (second, third):
        assert isinstance(r.error, ConnectionClosed) and r.error.innocent
    assert "proxy http://proxy.lan:3128 closed the connection after one answer" in str(second.error)
    # the next connection through it expects the close: nothing more is sent on it after an answer
    conn2, tr2 = proxied(loop, habits)
    nxt = Recorder("/d")
    conn2.send(nxt)
    conn2.data_received(response(b"x"))
    assert nxt.outcome == "complete" and conn2.server_closes and not conn2.usable and tr2.closed


def test_a_reset_or_a_close_mid_answer_teaches_nothing(loop) -> None:
    habits = ProxyHabits()
    conn, _ = proxied(loop, habits)
    a, b = Recorder("/a"), Recorder("/b")
    conn.send(a)
    conn.send(b)
    conn.data_received(response(b"hello")[:-2])
    conn.connection_lost(None)
    assert not habits.one_answer and a.outcome == "error" and not a.error.innocent
    conn, _ = proxied(loop, habits)
    conn.send(Recorder("/c"))
    conn.connection_lost(ConnectionResetError())
    assert not habits.one_answer


def test_a_407_on_a_proxied_connection_names_the_proxy(loop) -> None:
    conn, tr = proxied(loop, ProxyHabits(), Proxy("proxy.lan", 3128, basic("u", "s3cret")))
    rec = Recorder("/a")
    conn.send(rec)
    conn.data_received(response(b"denied", 407))
    assert isinstance(rec.error, HTTPError) and rec.error.status == 407 and not rec.error.retryable
    assert "proxy http://proxy.lan:3128 refused the credentials of the proxy URL" in str(rec.error)
    assert "s3cret" not in str(rec.error) and tr.aborted


def test_an_origin_in_noproxy_has_no_proxy() -> None:
    route = route_from({"proxy": "p:1", "noproxy": "example.org"}, {})
    assert route.proxy_for(HTTP) is None


# ---- the options -----------------------------------------------------------------------------------
def plan_for(tmp_path: Path, environ: dict | None = None, **given):
    values = resolve(OPTIONS, given=given, given_origin="argument", environ=environ or {}, use_config=False)
    return request_from(["http://data.example.org/a/"], str(tmp_path / "out"), values, environ=environ or {})


def test_the_options_exist_with_their_variables() -> None:
    by_key = {opt.key: opt for opt in OPTIONS}
    assert by_key["proxy"].env_var == "DTUNE_PROXY" and by_key["proxy"].secret
    assert by_key["noproxy"].env_var == "DTUNE_NOPROXY"
    assert "--cacert" in by_key["ca-certificate"].flags
    assert "-k" in by_key["insecure"].flags and by_key["insecure"].kind == "flag"


def test_the_proxy_credentials_stay_out_of_the_recorded_plan(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, proxy="http://u:s3cret@p:3128")
    assert plan.access.route.proxied(HTTP)
    assert "s3cret" not in repr(plan.record()) and "s3cret" not in repr(plan)


def test_a_bad_proxy_variable_of_dtune_names_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="^DTUNE_PROXY: socks5:// proxies are not supported"):
        plan_for(tmp_path, environ={"DTUNE_PROXY": "socks5://u:s3cret@p:1"})


def test_no_proxy_configured_means_no_route(tmp_path: Path) -> None:
    assert plan_for(tmp_path).access.route is None


# ---- TLS trust -------------------------------------------------------------------------------------
def test_no_option_is_the_default_context() -> None:
    assert trust.ssl_context_from({}) is None


def test_insecure_checks_nothing_and_says_so(tmp_path: Path) -> None:
    ctx = trust.ssl_context_from({"insecure": True, "ca_certificate": "/nowhere"})  # as curl: -k wins
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname
    assert trust.warnings(ctx) == [trust.INSECURE_WARNING]
    assert "not checked" in trust.INSECURE_WARNING
    assert trust.warnings(None) == []
    assert plan_for(tmp_path, insecure=True).access.warnings == [trust.INSECURE_WARNING]
    assert plan_for(tmp_path).access.warnings == []


def test_a_ca_file_is_the_only_trust(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "tls", tool="cryptography")
    ctx = trust.ssl_context_from({"ca_certificate": str(files.ca)})
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    names = [dict(x[0] for x in ca["subject"])["commonName"] for ca in ctx.get_ca_certs()]
    assert names == ["dtune test CA"]
    assert trust.warnings(ctx) == []


@pytest.mark.parametrize(("make", "words"), [
    (lambda d: d / "missing.pem", "no such file"),
    (lambda d: d, "a directory"),
    (lambda d: (d / "junk.pem").write_text("not a certificate\n") and d / "junk.pem", "no PEM certificate"),
])
def test_a_bad_ca_file_is_a_usage_error_naming_it(tmp_path: Path, make, words: str) -> None:
    path = make(tmp_path)
    with pytest.raises(UsageError) as err:
        trust.ssl_context_from({"ca_certificate": str(path)})
    assert str(err.value).startswith(f"--ca-certificate {path}: ") and words in str(err.value)


def test_the_default_context_is_made_once_and_honours_ssl_cert_file(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    files = make_tls_files(tmp_path / "tls", tool="cryptography")
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(files.ca))
    ctx = trust.default_context()
    assert trust.default_context() is ctx
    assert [dict(x[0] for x in ca["subject"])["commonName"] for ca in ctx.get_ca_certs()] == ["dtune test CA"]
    monkeypatch.delenv("SSL_CERT_FILE")
    other = trust.default_context()
    assert other is not ctx and trust.default_context() is other
    assert other.verify_mode == ssl.CERT_REQUIRED and other.check_hostname


def test_a_python_whose_openssl_looks_elsewhere_finds_the_distribution_bundle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = make_tls_files(tmp_path / "tls", tool="cryptography")
    nothing = ssl.DefaultVerifyPaths(None, None, "SSL_CERT_FILE", "/nowhere/cert.pem", "SSL_CERT_DIR", "/nowhere")
    monkeypatch.setattr(trust.sys, "platform", "linux")
    monkeypatch.setattr(trust.ssl, "get_default_verify_paths", lambda: nothing)
    monkeypatch.setattr(trust, "BUNDLES", (str(tmp_path / "missing.pem"), str(files.ca)))
    ctx = trust._platform_context()
    assert [dict(x[0] for x in ca["subject"])["commonName"] for ca in ctx.get_ca_certs()] == ["dtune test CA"]
    monkeypatch.setattr(trust, "BUNDLES", ())
    assert trust._platform_context() is None  # then Python's default context, whatever it finds


def test_the_variables_that_skip_the_proxy_module_are_every_one_it_reads() -> None:
    from dtune.http.access import PROXY_VARIABLES
    read = set()
    for scheme in ("http", "https"):
        for name in PROXY_VARIABLES + ("HTTP_PROXY", "NO_PROXY", "no_proxy", "ftp_proxy"):
            found = proxy_variable({name: "p:1"}, scheme)
            if found is not None:
                read.add(found[0])
    assert read == set(PROXY_VARIABLES)


@pytest.mark.parametrize(("values", "env", "proxied"), [
    ({}, {}, False), ({}, {"HTTP_PROXY": "http://evil:1", "no_proxy": "x"}, False),
    ({}, {"all_proxy": "p:1"}, True), ({"proxy": "p:1"}, {}, True),
])
def test_build_access_reads_the_proxy_settings_only_when_there_are_some(values: dict, env: dict,
                                                                         proxied: bool) -> None:
    from dtune.transfer import access_from
    access, _, _ = access_from(values, ["http://h/d/"], [], environ=env)
    assert (access.route is not None) is proxied
