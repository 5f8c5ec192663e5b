"""Property tests of the cookie parsers (untrusted input: ``Set-Cookie`` values and Netscape cookie
files): only ValueError (the file line parser's own) ever escapes; a cookie for an IP address is
never sent to another IP or to a name under it (RFC 6265 5.1.3); a public suffix is never a domain
a cookie goes to other hosts under; and what the jar stores survives its file."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.http.cookies import (
    PUBLIC_SUFFIXES,
    Cookie,
    CookieJar,
    is_ip,
    is_public_suffix,
    parse_cookie_date,
    parse_cookie_file,
    parse_cookie_line,
    parse_set_cookie,
)
from dtune.http.message import Origin

pytestmark = pytest.mark.fuzz

NOW = 1_800_000_000
IPS = ["127.0.0.1", "10.0.0.1", "192.168.0.1", "1.2.3.4", "0.0.1", "0.1", "::1", "fe80::1"]
NAMES = ["data.example.org", "example.org", "localhost", "a.b.co.uk", "co.uk", "evil.com", "com",
         "x.127.0.0.1", "host.1.2.3.4"]
HOSTS = IPS + NAMES
# domains a hostile server or file might claim, dotted or not: IPs, their suffixes, public suffixes
CLAIMS = st.sampled_from([*IPS, *NAMES, "0.0.1", ".0.0.1", "0.1", "1", ".1", "0.0.0.1", ".com", "uk", ".co.uk",
                          *sorted(PUBLIC_SUFFIXES), ".example.org", "example.org.", ""])
ORIGINS = st.builds(Origin, st.sampled_from(["http", "https"]), st.sampled_from(HOSTS), st.sampled_from([80, 443]))
ATTRIBUTE = st.one_of(
    st.builds(lambda d: f"Domain={d}", CLAIMS),
    st.sampled_from(["Path=/", "Path=/a", "Secure", "HttpOnly", "Max-Age=60", "Max-Age=-1", "Max-Age=x",
                     "Expires=Wed, 09 Jun 2100 10:18:14 GMT", "Expires=garbage", "=", ""]),
    st.text(max_size=20))
SET_COOKIE = st.one_of(
    st.text(max_size=300),
    st.builds(lambda name, value, attrs: "; ".join([f"{name}={value}", *attrs]),
              st.text(alphabet="abcXYZ09_-", min_size=1, max_size=8), st.text(max_size=16),
              st.lists(ATTRIBUTE, max_size=6)))


def _receivers(cookie: Cookie) -> list[str]:
    """Every host of ``HOSTS`` the cookie would be sent to (over https, so Secure ones count)."""
    return [h for h in HOSTS if cookie.matches("https", h)]


def _assert_scoped(cookie: Cookie) -> None:
    """The invariants of any cookie dtune keeps, whoever claimed what."""
    if is_ip(cookie.domain):   # an IP goes to itself only
        assert _receivers(cookie) == ([cookie.domain] if cookie.domain in HOSTS else []), cookie
    if is_public_suffix(cookie.domain):   # a public suffix never covers hosts under it
        assert all(h == cookie.domain for h in _receivers(cookie)), cookie
    for host in _receivers(cookie):
        assert host == cookie.domain or (host.endswith("." + cookie.domain) and not is_ip(host)), (cookie, host)


@FUZZ
@given(value=SET_COOKIE, origin=ORIGINS, target=st.text(max_size=40))
def test_a_set_cookie_is_parsed_without_error_and_stays_with_its_host(value: str, origin: Origin,
                                                                       target: str) -> None:
    cookie = parse_set_cookie(value, origin, target, NOW)   # (no exception is the module's to raise)
    if cookie is None:
        return
    assert cookie.path.startswith("/") and cookie.domain and ";" not in cookie.value
    _assert_scoped(cookie)
    if is_ip(origin.host):  # set by an IP: host-only, that IP alone
        assert (cookie.domain, cookie.subdomains) == (origin.host, False)
    assert cookie.domain == origin.host or origin.host.endswith("." + cookie.domain)  # never a foreign domain
    if cookie.secure:
        assert origin.scheme == "https"


@FUZZ
@given(values=st.lists(SET_COOKIE, max_size=6), setter=ORIGINS, asker=ORIGINS)
def test_the_jar_never_sends_an_ip_s_cookie_to_another_host_or_a_public_suffix_s_to_hosts_under_it(
        values: list[str], setter: Origin, asker: Origin) -> None:
    jar = CookieJar()
    jar.store(setter, "/", values, NOW)
    sent = jar.headers("GET", asker, "/", False)
    if sent is None:
        return
    if is_ip(setter.host) or is_ip(asker.host):
        assert setter.host == asker.host, (setter, asker, sent)
    for cookie in jar.cookies():
        _assert_scoped(cookie)


LINE = st.builds(
    lambda http_only, domain, flag, path, secure, expires, name, value: "\t".join(
        [("#HttpOnly_" if http_only else "") + domain, flag, path, secure, expires, name, value]),
    st.booleans(), CLAIMS, st.sampled_from(["TRUE", "TRUE", "FALSE", "true", "x"]),
    st.sampled_from(["/", "/", "/a", "a", ""]), st.sampled_from(["TRUE", "FALSE", "FALSE", "maybe"]),
    st.sampled_from(["0", "0", str(NOW + 60), "1", "-5", "x", "9" * 25]),
    st.one_of(st.sampled_from(["sid", "a", "b"]), st.text(alphabet="abc=; ", max_size=4)), st.text(max_size=8))
FILE = st.one_of(st.lists(st.one_of(LINE, LINE, st.text(max_size=30)), max_size=8).map("\n".join),
                 st.text(max_size=400))


@FUZZ
@given(text=FILE)
def test_a_cookie_file_loads_without_error_and_never_widens_an_ip_or_a_public_suffix(text: str) -> None:
    got = parse_cookie_file(text, NOW)   # malformed lines are counted, never raised
    assert got.malformed + got.expired + len(got.cookies) <= len(text.splitlines())
    for cookie in got.cookies:
        _assert_scoped(cookie)
        if is_ip(cookie.domain) or is_public_suffix(cookie.domain):
            assert not cookie.subdomains, cookie
    jar = CookieJar(got.cookies)
    for ip in IPS:  # an IP's cookie reaches that IP only
        sent = jar.headers("GET", Origin("https", ip, 443), "/a", False)
        if sent is not None:
            assert {c.domain for c in got.cookies if c.matches("https", ip)} <= {ip}


@FUZZ
@given(line=st.one_of(LINE, st.text(max_size=60)))
def test_a_cookie_line_raises_only_value_error(line: str) -> None:
    try:
        parse_cookie_line(line, NOW)
    except ValueError:
        pass


@FUZZ
@given(text=st.text(max_size=80))
def test_cookie_date_parser_never_crashes(text: str) -> None:
    when = parse_cookie_date(text)
    assert when is None or isinstance(when, int)


@FUZZ
@given(name=st.text(alphabet="abcXYZ09_-", min_size=1, max_size=10),
       value=st.text(alphabet="abcXYZ09_-=/+.:", max_size=20),
       path=st.sampled_from(["/", "/a", "/a/b/"]), secure=st.booleans(), http_only=st.booleans(),
       subdomains=st.booleans(), expires=st.sampled_from([0, NOW + 1, NOW + 10**6]))
def test_any_stored_cookie_survives_the_file(name: str, value: str, path: str, secure: bool, http_only: bool,
                                             subdomains: bool, expires: int) -> None:
    c = Cookie("example.org", subdomains, path, secure, expires, name, value, http_only)
    assert parse_cookie_file(CookieJar([c]).netscape(NOW), NOW).cookies == [c]


def test_a_public_suffix_line_of_a_cookie_file_is_host_only_and_a_made_cookie_cannot_widen_one() -> None:
    got = parse_cookie_file(".com\tTRUE\t/\tFALSE\t0\ta\t1\n.co.uk\tTRUE\t/\tFALSE\t0\tb\t2\n"
                            ".example.org\tTRUE\t/\tFALSE\t0\tc\t3\n", NOW)
    assert [(c.domain, c.subdomains) for c in got.cookies] == [("com", False), ("co.uk", False),
                                                                 ("example.org", True)]
    jar = CookieJar(got.cookies)
    assert jar.headers("GET", Origin("https", "evil.com", 443), "/", False) is None
    assert jar.headers("GET", Origin("https", "a.b.co.uk", 443), "/", False) is None
    assert jar.headers("GET", Origin("https", "data.example.org", 443), "/", False) == {"Cookie": "c=3"}
    # a Cookie made with the flag anyway (not by the parsers) still does not go under them
    assert not Cookie("com", True, "/", False, 0, "x", "1").matches("https", "evil.com")
    assert not Cookie("0.0.1", True, "/", False, 0, "x", "1").matches("https", "127.0.0.1")
