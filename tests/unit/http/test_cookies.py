"""``dtune.http.cookies``: RFC 6265's rules for what a ``Set-Cookie`` stores and where a cookie
goes, the Netscape file both ways, and untrusted input that never crashes the parsers."""

from __future__ import annotations

import asyncio
import calendar
import os
import time
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.fuzz import FUZZ
from support.recorder import Recorder, response

from dtune.http.access import Access
from dtune.http.auth import OriginBasic, basic_auth
from dtune.http.connection import Connection
from dtune.http.cookies import (
    SESSION,
    Cookie,
    CookieJar,
    default_path,
    is_ip,
    is_public_suffix,
    parse_cookie_date,
    parse_cookie_file,
    parse_set_cookie,
)
from dtune.http.message import Origin

NOW = 1_800_000_000
DATA = Origin("http", "data.example.org", 80)
TLS = Origin("https", "data.example.org", 443)


def stored(value: str, origin: Origin = DATA, target: str = "/a/b/c") -> Cookie | None:
    return parse_set_cookie(value, origin, target, NOW)


def cookie_header(jar: CookieJar, origin: Origin, target: str = "/") -> str | None:
    got = jar.headers("GET", origin, target, False)
    return None if got is None else got["Cookie"]


# -- Set-Cookie: what is stored ----------------------------------------------------------------


def test_without_domain_a_cookie_is_host_only_with_the_default_path() -> None:
    c = stored("sid=1")
    assert c is not None and (c.domain, c.subdomains, c.path, c.expires) == ("data.example.org", False, "/a/b", SESSION)
    jar = CookieJar([c])
    assert cookie_header(jar, DATA, "/a/b/x") == "sid=1"
    assert cookie_header(jar, Origin("http", "www.data.example.org", 80), "/a/b/x") is None
    assert cookie_header(jar, DATA, "/a/bc") is None


@pytest.mark.parametrize(("target", "path"), [("/", "/"), ("/file", "/"), ("/a/file?x=/y", "/a"),
                                              ("/a/b/", "/a/b"), ("", "/")])
def test_default_path(target: str, path: str) -> None:
    assert default_path(target) == path


def test_a_domain_cookie_goes_to_subdomains_and_its_leading_dot_is_ignored() -> None:
    c = stored("sid=1; Domain=.Example.ORG; Path=/")
    assert c is not None and (c.domain, c.subdomains) == ("example.org", True)
    jar = CookieJar([c])
    for host in ("example.org", "data.example.org", "a.b.example.org"):
        assert cookie_header(jar, Origin("http", host, 80)) == "sid=1"
    assert cookie_header(jar, Origin("http", "badexample.org", 80)) is None


@pytest.mark.parametrize("domain", ["other.org", "org", "com", "co.uk", "ample.org", "www.data.example.org"])
def test_a_domain_the_host_may_not_set_is_refused(domain: str) -> None:
    assert stored(f"sid=1; Domain={domain}") is None
    assert stored("sid=1; Domain=co.uk", Origin("http", "bbc.co.uk", 80)) is None


def test_a_single_label_host_may_name_itself() -> None:
    host = Origin("http", "localhost", 8080)
    c = stored("sid=1; Domain=localhost", host)
    assert c is not None and (c.domain, c.subdomains) == ("localhost", False)


def test_an_ip_address_matches_only_itself() -> None:
    ip = Origin("http", "127.0.0.1", 8080)
    c = stored("sid=1; Domain=127.0.0.1", ip)
    assert c is not None and not c.subdomains
    assert stored("sid=1; Domain=0.0.1", ip) is None
    # from a cookie file: ".0.0.1" is no domain of 127.0.0.1, "127.0.0.1" is
    loaded = parse_cookie_file(".0.0.1\tTRUE\t/\tFALSE\t0\ta\t1\n127.0.0.1\tTRUE\t/\tFALSE\t0\tb\t2\n", NOW)
    jar = CookieJar(loaded.cookies)
    assert cookie_header(jar, ip) == "b=2"
    assert cookie_header(jar, Origin("http", "10.127.0.0.1", 80)) is None


def test_secure_is_set_and_sent_over_https_only() -> None:
    assert stored("s=1; Secure") is None            # an http answer cannot set it
    c = stored("s=1; Secure; Path=/", TLS)
    assert c is not None and c.secure
    jar = CookieJar([c])
    assert cookie_header(jar, TLS) == "s=1"
    assert cookie_header(jar, DATA) is None


def test_httponly_is_kept() -> None:
    c = stored("h=1; HttpOnly")
    assert c is not None and c.http_only


def test_max_age_wins_over_expires() -> None:
    c = stored("a=1; Expires=Wed, 09 Jun 2100 10:18:14 GMT; Max-Age=60")
    assert c is not None and c.expires == NOW + 60
    c = stored("a=1; Max-Age=60; Expires=Wed, 09 Jun 2100 10:18:14 GMT")
    assert c is not None and c.expires == NOW + 60
    c = stored("a=1; Expires=Wed, 09 Jun 2100 10:18:14 GMT")
    assert c is not None and c.expires == calendar.timegm((2100, 6, 9, 10, 18, 14))


@pytest.mark.parametrize("value", ["a=1; Max-Age=0", "a=1; Max-Age=-5", "a=1; Expires=Thu, 01 Jan 1970 00:00:00 GMT"])
def test_an_expiry_in_the_past_deletes_the_cookie(value: str) -> None:
    jar = CookieJar()
    jar.store(DATA, "/a/b/c", ["a=1; Max-Age=100"], NOW)
    assert cookie_header(jar, DATA, "/a/b/c") == "a=1"
    jar.store(DATA, "/a/b/c", [value], NOW)
    assert cookie_header(jar, DATA, "/a/b/c") is None and len(jar) == 0


@pytest.mark.parametrize(("text", "when"), [
    ("Wed, 09 Jun 2021 10:18:14 GMT", (2021, 6, 9, 10, 18, 14)),
    ("Wednesday, 09-Jun-21 10:18:14 GMT", (2021, 6, 9, 10, 18, 14)),
    ("Sun Nov  6 08:49:37 1994", (1994, 11, 6, 8, 49, 37)),
    ("Thu, 01 Jan 1970 00:00:00 GMT", (1970, 1, 1, 0, 0, 0)),
    ("Fri, 31 Dec 99 23:59:59 GMT", (1999, 12, 31, 23, 59, 59)),
    ("Tue, 29 Feb 2028 12:00:00 GMT", (2028, 2, 29, 12, 0, 0)),
])
def test_cookie_dates(text: str, when: tuple[int, ...]) -> None:
    assert parse_cookie_date(text) == calendar.timegm(when)


@pytest.mark.parametrize("text", ["", "tomorrow", "Wed, 09 Jun 2021", "Wed, 32 Jun 2021 10:18:14 GMT",
                                  "Wed, 09 Jun 2021 25:18:14 GMT", "09 Foo 2021 10:18:14"])
def test_not_a_cookie_date(text: str) -> None:
    assert parse_cookie_date(text) is None


@pytest.mark.parametrize("value", ["novalue", "=1", "a b=1", "a=1\x00", "a=1\x7f", "a=" + "x" * 5000])
def test_a_malformed_set_cookie_is_ignored(value: str) -> None:
    assert stored(value) is None


def test_a_cookie_replaces_the_one_of_the_same_name_domain_and_path() -> None:
    jar = CookieJar()
    jar.store(DATA, "/", ["a=1", "b=2; Path=/x"], NOW)
    jar.store(DATA, "/", ["a=3"], NOW)
    assert cookie_header(jar, DATA, "/x/y") == "b=2; a=3"   # the longer path first
    assert jar.set == 3 and jar.refused == 0


# -- the connection keeps repeated Set-Cookie apart --------------------------------------------


def test_repeated_set_cookie_values_stay_apart_and_other_headers_are_joined() -> None:
    loop = asyncio.new_event_loop()
    try:
        conn = Connection(DATA, loop)
        conn.connection_made(_Sink())  # type: ignore[arg-type]
        ex = Recorder("/")
        conn.send(ex)
        conn.data_received(response(b"", 302, "Location: /x",
                                    "Set-Cookie: a=1; Expires=Wed, 09 Jun 2100 10:18:14 GMT; Path=/",
                                    "Set-Cookie: b=2; Path=/", "Vary: a", "Vary: b"))
    finally:
        loop.close()
    assert ex.headers["set-cookie"].split("\n") == ["a=1; Expires=Wed, 09 Jun 2100 10:18:14 GMT; Path=/",
                                                     "b=2; Path=/"]
    assert ex.headers["vary"] == "a, b"
    access = Access(jar=CookieJar())
    access.received(DATA, "/", ex.headers)
    assert cookie_header(access.jar, DATA, "/") == "a=1; b=2"


class _Sink:
    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


# -- an https → http redirect carries no credential ------------------------------------------


def test_after_an_https_to_http_hop_only_cookies_not_marked_secure_go() -> None:
    plain = Origin("http", "cdn.example.org", 80)
    jar = CookieJar([Cookie("example.org", True, "/", False, SESSION, "open", "1"),
                     Cookie("example.org", True, "/", True, SESSION, "tls", "2")])
    access = Access([OriginBasic({plain: ("u", "p")})], jar=jar)
    assert b"Authorization" in access.request("GET", plain, "/f")   # named for it, and no hop yet
    access.redirected("https://data.example.org/f", "http://cdn.example.org/f")
    sent = access.request("GET", plain, "/f").decode()
    assert "Authorization" not in sent and basic_auth("u", "p") not in sent
    assert "Cookie: open=1\r\n" in sent
    # an origin the user named keeps its credentials; an https → https hop marks nothing
    named = Access([OriginBasic({plain: ("u", "p")})], jar=jar, trusted=[plain])
    named.redirected("https://data.example.org/f", "http://cdn.example.org/f")
    assert b"Authorization" in named.request("GET", plain, "/f")
    access.redirected("https://data.example.org/f", "https://other.example.org/f")
    assert access.downgraded == {plain}


# -- the Netscape file both ways -------------------------------------------------------------


def test_save_and_load_round_trip_with_httponly_and_session_cookies(tmp_path: Path) -> None:
    jar = CookieJar(save_to=str(tmp_path / "jar.txt"))
    jar.store(DATA, "/a/b", ["sid=s1; HttpOnly", "wide=w; Domain=example.org; Path=/; Max-Age=600"], NOW)
    jar.store(TLS, "/", ["t=1; Secure; Expires=Wed, 09 Jun 2100 10:18:14 GMT"], NOW)
    jar.save(NOW)
    text = (tmp_path / "jar.txt").read_text()
    assert text.startswith("# Netscape HTTP Cookie File\n")
    assert "#HttpOnly_data.example.org\tFALSE\t/a\tFALSE\t0\tsid\ts1\n" in text
    assert f".example.org\tTRUE\t/\tFALSE\t{NOW + 600}\twide\tw\n" in text
    assert oct(os.stat(tmp_path / "jar.txt").st_mode & 0o777) == "0o600"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dtune-cookies-")]
    again = parse_cookie_file(text, NOW)
    assert again.malformed == 0 and sorted(again.cookies, key=lambda c: c.name) == sorted(jar.cookies(),
                                                                                          key=lambda c: c.name)
    assert parse_cookie_file(text, NOW + 601).expired == 1   # (``wide`` has expired by then)


def test_expired_cookies_are_not_saved() -> None:
    jar = CookieJar([Cookie("a.org", False, "/", False, NOW - 1, "old", "x"),
                     Cookie("a.org", False, "/", False, NOW + 5, "new", "y")])
    assert "\told\t" not in jar.netscape(NOW) and "\tnew\ty" in jar.netscape(NOW)


# -- untrusted input never crashes ------------------------------------------------------------

_ORIGINS = st.sampled_from([DATA, TLS, Origin("http", "127.0.0.1", 8080), Origin("http", "localhost", 80),
                            Origin("http", "[::1]".strip("[]"), 80)])


@pytest.mark.fuzz
@FUZZ
@given(value=st.text(max_size=300), origin=_ORIGINS, target=st.text(max_size=40))
def test_set_cookie_parser_never_crashes(value: str, origin: Origin, target: str) -> None:
    c = parse_set_cookie(value, origin, target, NOW)
    if c is not None:
        assert c.path.startswith("/") and c.domain and ";" not in c.value
        jar = CookieJar()
        jar.store(origin, target, [value], NOW)
        jar.headers("GET", origin, "/" + target, False)


@pytest.mark.fuzz
@FUZZ
@given(attrs=st.lists(st.sampled_from(["Path=/", "Domain=example.org", "Secure", "HttpOnly", "Max-Age=9",
                                       "Max-Age=-1", "Expires=Wed, 09 Jun 2100 10:18:14 GMT", "Domain=org",
                                       "Max-Age=99999999999999999999", "Expires=", "=", ""]), max_size=6),
       name=st.text(alphabet="abc=;, \t", min_size=0, max_size=5))
def test_set_cookie_attributes_in_any_order(attrs: list[str], name: str) -> None:
    parse_set_cookie("; ".join([f"{name}=v", *attrs]), TLS, "/x", NOW)


@pytest.mark.fuzz
@FUZZ
@given(text=st.text(max_size=400))
def test_cookie_file_parser_never_crashes(text: str) -> None:
    got = parse_cookie_file(text, NOW)
    assert got.malformed + got.expired + len(got.cookies) <= len(text.splitlines())


@pytest.mark.fuzz
@FUZZ
@given(fields=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
                       min_size=5, max_size=8))
def test_tab_separated_garbage_never_crashes(fields: list[str]) -> None:
    parse_cookie_file("\t".join(fields), NOW)


@pytest.mark.fuzz
@FUZZ
@given(text=st.text(max_size=80))
def test_cookie_date_parser_never_crashes(text: str) -> None:
    when = parse_cookie_date(text)
    assert when is None or isinstance(when, int)


@pytest.mark.fuzz
@FUZZ
@given(name=st.text(alphabet="abcXYZ09_-", min_size=1, max_size=10),
       value=st.text(alphabet="abcXYZ09_-=/+.:", max_size=20),
       path=st.sampled_from(["/", "/a", "/a/b/"]), secure=st.booleans(), http_only=st.booleans(),
       subdomains=st.booleans(), expires=st.sampled_from([0, NOW + 1, NOW + 10**6]))
def test_any_stored_cookie_survives_the_file(name: str, value: str, path: str, secure: bool, http_only: bool,
                                             subdomains: bool, expires: int) -> None:
    c = Cookie("example.org", subdomains, path, secure, expires, name, value, http_only)
    assert parse_cookie_file(CookieJar([c]).netscape(NOW), NOW).cookies == [c]


def test_a_cookie_is_not_sent_once_it_has_expired() -> None:
    jar = CookieJar()
    now = time.time()
    jar.store(DATA, "/", ["a=1; Max-Age=1000", "b=2"], now)
    jar.store(DATA, "/", ["c=3; Max-Age=1"], now - 5)   # (stored five seconds ago: gone by now)
    assert cookie_header(jar, DATA) == "a=1; b=2" and len(jar) == 2


# -- untrusted cookies never reach another host ------------------------------------------------

_HOSTS = ["127.0.0.1", "10.0.0.1", "0.0.1", "1", "::1", "fe80::1", "data.example.org", "example.org", "org",
          "co.uk", "a.co.uk", "b.a.co.uk", "localhost", "evil.example", "1.127.0.0.1", "x.0.0.1"]
_DOMAINS = st.sampled_from(_HOSTS + [".org", ".co.uk", ".0.0.1", ".1", "", "ORG", ".example.org"])


@pytest.mark.fuzz
@FUZZ
@given(host=st.sampled_from(_HOSTS), scheme=st.sampled_from(["http", "https"]), domain=st.one_of(
    _DOMAINS, st.text(max_size=12)), extra=st.sampled_from(["", "; Path=/", "; Secure", "; Max-Age=60"]),
    other=st.sampled_from(_HOSTS))
def test_a_set_cookie_never_reaches_a_host_it_may_not(host: str, scheme: str, domain: str, extra: str,
                                                       other: str) -> None:
    origin = Origin(scheme, host, 443 if scheme == "https" else 80)
    cookie = parse_set_cookie(f"n=v; Domain={domain}{extra}", origin, "/a", NOW)
    if cookie is None:
        return
    if cookie.subdomains:
        assert not is_public_suffix(cookie.domain), cookie  # no cookie for a whole public suffix
        assert not is_ip(host)
    if not cookie.matches(scheme, other):
        return
    assert other == host or (not is_ip(host) and not is_ip(other) and other.endswith("." + cookie.domain)
                             and host.endswith(cookie.domain))


@pytest.mark.fuzz
@FUZZ
@given(domain=_DOMAINS, flag=st.sampled_from(["TRUE", "FALSE", "true"]), other=st.sampled_from(_HOSTS))
@example(domain=".co.uk", flag="TRUE", other="a.co.uk")
@example(domain="org", flag="TRUE", other="example.org")
def test_a_cookie_file_line_for_an_ip_or_a_public_suffix_reaches_that_host_only(domain: str, flag: str,
                                                                               other: str) -> None:
    got = parse_cookie_file(f"{domain}\t{flag}\t/\tFALSE\t0\tn\tv\n", NOW)
    for cookie in got.cookies:
        if is_ip(cookie.domain) or is_public_suffix(cookie.domain):
            assert not cookie.subdomains
            assert cookie.matches("http", other) == (other == cookie.domain)
