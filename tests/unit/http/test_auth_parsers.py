"""``dtune.http.auth`` parsers on plain data: --header, URL userinfo, .netrc, cookie files, tokens."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from dtune.errors import UsageError
from dtune.http.auth import (
    RESERVED_HEADERS,
    NetrcAuth,
    NetrcEntry,
    NetrcError,
    basic_auth,
    load_cookies,
    load_netrc,
    netrc_path,
    parse_header,
    parse_headers,
    parse_netrc,
    read_token,
    strip_userinfo,
)
from dtune.http.cookies import Cookie, parse_cookie_file, parse_cookie_line
from dtune.http.message import Origin

SECRET = "s3cr3t-Pa55"

# -- --header ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("X-Api-Key: abc", ("X-Api-Key", "abc")),
    ("X-Api-Key:abc", ("X-Api-Key", "abc")),
    ("  X-A  :   spaced value \t", ("X-A", "spaced value")),
    ("X-Empty:", ("X-Empty", "")),
    ("X-Colon: a:b:c", ("X-Colon", "a:b:c")),
    ("Authorization: Bearer x", ("Authorization", "Bearer x")),
    ("user-agent: mine/1", ("User-Agent", "mine/1")),     # the spelling build_request looks for
    ("X-Latin: caf\u00e9", ("X-Latin", "caf\u00e9")),
])
def test_header_parses(text: str, expected: tuple[str, str]) -> None:
    assert parse_header(text) == expected


@pytest.mark.parametrize(("text", "says"), [
    ("NoColon", "no ':'"),
    ("X-A: one\r\nX-B: two", "line break"),
    ("X-A: one\ntwo", "line break"),
    ("X-A: nul\x00", "NUL"),
    (": value", "not a valid header name"),
    ("Bad Name: v", "not a valid header name"),
    ("X-\u00fc: v", "not a valid header name"),
    ("X-A: \u65e5\u672c", "cannot carry"),
])
def test_header_refused(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        parse_header(text)


@pytest.mark.parametrize("name", ["Host", "range", "If-Range", "CONTENT-LENGTH", "Transfer-Encoding",
                                  "Connection", "Accept-Encoding"])
def test_header_reserved_names_refused(name: str) -> None:
    assert name.lower() in RESERVED_HEADERS
    with pytest.raises(UsageError, match="dtune sets this header itself"):
        parse_header(f"{name}: x")


def test_header_error_never_holds_the_value() -> None:
    for text in (f"Host: {SECRET}", f"X-A: {SECRET}\r\n", f"X-A: {SECRET}\u65e5"):
        with pytest.raises(UsageError) as err:
            parse_header(text)
        assert SECRET not in str(err.value)


def test_headers_same_name_twice_refused() -> None:
    assert parse_headers(["X-A: 1", "X-B: 2"]) == {"X-A": "1", "X-B": "2"}
    with pytest.raises(UsageError, match="given twice"):
        parse_headers(["X-A: 1", "x-a: 2"])


# -- URL userinfo ------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "bare", "cred"), [
    ("http://host/a", "http://host/a", None),
    ("http://u:p@host/a", "http://host/a", ("u", "p")),
    ("https://u:p@host:8443", "https://host:8443", ("u", "p")),
    ("http://us%40er:p%3Ass%2F@host/x?q=1#f", "http://host/x?q=1#f", ("us@er", "p:ss/")),
    ("http://u:p@ss@host/", "http://host/", ("u", "p@ss")),           # the last '@' ends the userinfo
    ("http://user@host/", "http://host/", ("user", "")),
    ("http://u:@host/", "http://host/", ("u", "")),
    ("http://u:p@[::1]:81/d/", "http://[::1]:81/d/", ("u", "p")),
    ("http://host/a@b/c?x=@", "http://host/a@b/c?x=@", None),           # '@' in the path or query
    ("http://host?x=a@b", "http://host?x=a@b", None),
    ("HTTP://u:p@host/", "HTTP://host/", ("u", "p")),
    ("http://u:%E2%9C%93@host/", "http://host/", ("u", "\u2713")),
    ("local/a@b.txt", "local/a@b.txt", None),                           # a local file
])
def test_strip_userinfo(url: str, bare: str, cred: tuple[str, str] | None) -> None:
    assert strip_userinfo(url) == (bare, cred)


def test_userinfo_of_another_scheme_refused_without_the_password() -> None:
    with pytest.raises(UsageError) as err:
        strip_userinfo(f"ftp://u:{SECRET}@host/f")
    assert SECRET not in str(err.value) and "ftp://***@host/f" in str(err.value)
    with pytest.raises(UsageError, match="no host"):
        strip_userinfo(f"http://u:{SECRET}@/f")


def test_basic_auth_is_rfc7617() -> None:
    assert basic_auth("Aladdin", "open sesame") == "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
    assert base64.b64decode(basic_auth("\u00fc", "p:q")[6:]) == "\u00fc:p:q".encode()


# -- .netrc ------------------------------------------------------------------------------------


def test_netrc_entries_across_lines_default_and_case() -> None:
    text = ("machine Example.ORG login alice password a1\n"
            "machine other.test\n  login\n bob\n  password b2\n  account ignored\n"
            "default login anon password guest\n")
    assert parse_netrc(text) == [NetrcEntry("example.org", "alice", "a1"), NetrcEntry("other.test", "bob", "b2"),
                                 NetrcEntry(None, "anon", "guest")]


def test_netrc_macdef_skipped_to_the_empty_line() -> None:
    text = ("machine a login u password p\n"
            "macdef init\n  cd /pub\n  machine evil login x password y\n  bin\n\n"
            "machine b login v password q\n")
    assert parse_netrc(text) == [NetrcEntry("a", "u", "p"), NetrcEntry("b", "v", "q")]
    assert parse_netrc("machine a login u password p\nmacdef m\nstuff") == [NetrcEntry("a", "u", "p")]


def test_netrc_quoted_words_and_comments() -> None:
    text = ('# my netrc\nmachine a login "al ice" password "p\\"w d\\\\x"  # trailing comment\n'
            'machine b login u password #notacomment\n')
    assert parse_netrc(text) == [NetrcEntry("a", "al ice", 'p"w d\\x'), NetrcEntry("b", "u", "#notacomment")]


def test_netrc_entry_repr_hides_the_password() -> None:
    assert SECRET not in repr(parse_netrc(f"machine a login u password {SECRET}"))


@pytest.mark.parametrize(("text", "line", "says"), [
    ("machine a login u password p\nlogin x", 2, None),          # fine: login of machine a again
    ("login x password y\n", 1, "before any machine"),
    ("machine a login u\n\npassword", 3, "without a value"),
    ("machine a\nlogin u password \"open\nstill open", 2, "not closed"),
    ("machine a\nlogn u password p\n", 2, "a word where"),
    ("machine a login u password p\n\"quoted\" x\n", 2, "quoted word where"),
])
def test_netrc_errors_name_the_line(text: str, line: int, says: str | None) -> None:
    if says is None:
        parse_netrc(text)
        return
    with pytest.raises(NetrcError, match=says) as err:
        parse_netrc(text)
    assert err.value.line == line and f"line {line}:" in str(err.value)


def test_netrc_error_never_quotes_the_file() -> None:
    for text in (f"machine a login u {SECRET} p", f"{SECRET}", f'machine a password "{SECRET}'):
        with pytest.raises(NetrcError) as err:
            parse_netrc(text)
        assert SECRET not in str(err.value)


def test_netrc_auth_by_host_any_port_else_default() -> None:
    auth = NetrcAuth(parse_netrc("machine a.test login u password p\ndefault login d password q\n"
                                 "machine nopass login x\n"))
    want = {"Authorization": basic_auth("u", "p")}
    for origin in (Origin("http", "a.test", 80), Origin("https", "a.test", 443), Origin("http", "a.test", 8080)):
        assert auth.headers("GET", origin, "/", False) == want
    assert auth.headers("GET", Origin("http", "b.test", 80), "/", True) == {"Authorization": basic_auth("d", "q")}
    assert auth.headers("GET", Origin("http", "nopass", 80), "/", True) is None   # no password: nothing
    assert NetrcAuth(parse_netrc("machine a login u password p")).headers(
        "GET", Origin("http", "b", 80), "/", True) is None


def test_netrc_path_order(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path)}
    assert netrc_path({}, home) == (tmp_path / ".netrc", False)
    assert netrc_path({"netrc": True}, {**home, "NETRC": "/x/n"}) == (Path("/x/n"), False)
    assert netrc_path({"netrc_file": "/y/n"}, {**home, "NETRC": "/x/n"}) == (Path("/y/n"), True)
    assert netrc_path({"netrc": False, "netrc_file": "/y/n"}, home) == (None, False)


def test_load_netrc_default_vs_named(tmp_path: Path) -> None:
    said: list[str] = []
    missing = tmp_path / "none"
    assert load_netrc(missing, False, said.append) == [] and said == []
    with pytest.raises(UsageError, match=f"--netrc-file {missing}: no such file"):
        load_netrc(missing, True, said.append)
    bad = tmp_path / "netrc"
    bad.write_text(f"machine a login u password {SECRET}\nbogus\n")
    assert load_netrc(bad, False, said.append) == []
    assert said == [f"netrc file {bad}: line 2: a word where machine, default, login, password, account "
                    "or macdef belongs; not used"]
    with pytest.raises(UsageError, match=f"--netrc-file {bad}: line 2") as err:
        load_netrc(bad, True, said.append)
    assert SECRET not in str(err.value)


def test_load_netrc_reads_a_group_readable_file(tmp_path: Path) -> None:
    path = tmp_path / "netrc"
    path.write_text("machine a login u password p\n")
    path.chmod(0o644)
    said: list[str] = []
    assert load_netrc(path, True, said.append) == [NetrcEntry("a", "u", "p")] and said == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_load_netrc_unreadable_default_warns(tmp_path: Path) -> None:
    path = tmp_path / "netrc"
    path.write_text("machine a login u password p\n")
    path.chmod(0)
    said: list[str] = []
    assert load_netrc(path, False, said.append) == []
    assert said == [f"netrc file {path}: cannot read: Permission denied; not used"]


# -- cookie files ------------------------------------------------------------------------------

NOW = 1_800_000_000


@pytest.mark.parametrize(("line", "cookie"), [
    (".example.org\tTRUE\t/\tFALSE\t0\tsid\tabc", Cookie("example.org", True, "/", False, 0, "sid", "abc")),
    ("example.org\tFALSE\t/data\tTRUE\t1900000000\tk\tv=1",
     Cookie("example.org", False, "/data", True, 1900000000, "k", "v=1")),
    (".example.org\tFALSE\t/\tFALSE\t0\tk\tv", Cookie("example.org", True, "/", False, 0, "k", "v")),
    ("#HttpOnly_Example.ORG\tFALSE\t/\tFALSE\t0\th\tx",
     Cookie("example.org", False, "/", False, 0, "h", "x", http_only=True)),
    ("example.org\tFALSE\t/\tFALSE\t0\tempty", Cookie("example.org", False, "/", False, 0, "empty", "")),
    ("example.org\ttrue\t/\tfalse\t0\tk\tv", Cookie("example.org", True, "/", False, 0, "k", "v")),
])
def test_cookie_line(line: str, cookie: Cookie) -> None:
    assert parse_cookie_line(line, NOW) == cookie


def test_cookie_expired_is_none() -> None:
    assert parse_cookie_line("a\tFALSE\t/\tFALSE\t1700000000\tk\tv", NOW) is None
    assert parse_cookie_line("a\tFALSE\t/\tFALSE\t1800000001\tk\tv", NOW) is not None


@pytest.mark.parametrize("line", [
    "a FALSE / FALSE 0 k v",                        # spaces, not tabs
    "a\tFALSE\t/\tFALSE\t0",                         # too few fields
    "a\tFALSE\t/\tFALSE\t0\tk\tv\textra",            # too many
    "a\tMAYBE\t/\tFALSE\t0\tk\tv",
    "a\tFALSE\t/\tYES\t0\tk\tv",
    "a\tFALSE\tnoslash\tFALSE\t0\tk\tv",
    "a\tFALSE\t/\tFALSE\tsoon\tk\tv",
    "\tFALSE\t/\tFALSE\t0\tk\tv",                    # no domain
    "a b\tFALSE\t/\tFALSE\t0\tk\tv",
    "a\tFALSE\t/\tFALSE\t0\t\tv",                    # no name
    "a\tFALSE\t/\tFALSE\t0\tk;x\tv",
    "a\tFALSE\t/\tFALSE\t0\tk\tv;injected=1",
    "a\tFALSE\t/\tFALSE\t0\tk\tv\x01",
    "a\tFALSE\t/\tFALSE\t0\tk\t\u65e5",
])
def test_cookie_line_malformed(line: str) -> None:
    with pytest.raises(ValueError):
        parse_cookie_line(line, NOW)


def test_cookie_file_counts_and_skips() -> None:
    text = ("# Netscape HTTP Cookie File\n\n"
            ".a.test\tTRUE\t/\tFALSE\t0\tk\tv\n"
            "junk line\n"
            "a.test\tFALSE\t/\tFALSE\t1\told\tgone\n"
            "#HttpOnly_a.test\tFALSE\t/\tFALSE\t0\th\tx\r\n"
            "a.test\tNOPE\t/\tFALSE\t0\tk\tv\n")
    jar = parse_cookie_file(text, NOW)
    assert [c.name for c in jar.cookies] == ["k", "h"]
    assert (jar.malformed, jar.first_bad, jar.expired) == (2, 4, 1)


def test_cookie_matching_domain_secure_path() -> None:
    dot = Cookie("example.org", True, "/", False, 0, "a", "1")
    exact = Cookie("example.org", False, "/data", True, 0, "b", "2")
    assert dot.matches("http", "example.org") and dot.matches("http", "www.example.org")
    assert not dot.matches("http", "badexample.org") and not dot.matches("http", "example.org.evil")
    assert exact.matches("https", "example.org") and not exact.matches("http", "example.org")
    assert not exact.matches("https", "www.example.org")
    assert exact.path_matches("/data") and exact.path_matches("/data/x") and not exact.path_matches("/database")
    assert not exact.path_matches("/") and dot.path_matches("/anything")
    slash = Cookie("e", False, "/d/", False, 0, "c", "3")
    assert slash.path_matches("/d/x") and not slash.path_matches("/d")


def test_load_cookies_warns_once_and_refuses_a_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "jar.txt"
    path.write_text(f"a\tFALSE\t/\tFALSE\t0\tk\tv\nbad {SECRET}\nworse\n")
    said: list[str] = []
    assert [c.name for c in load_cookies(str(path), said.append)] == ["k"]
    assert said == [f"cookie file {path}: 2 malformed lines skipped (the first is line 2)"]
    assert load_cookies(str(tmp_path / "none"), said.append) == []   # (written at the end of the run)
    with pytest.raises(UsageError, match="--cookies .*: no such directory"):
        load_cookies(str(tmp_path / "none" / "jar"), said.append)


# -- bearer tokens -----------------------------------------------------------------------------


def test_token_from_env_and_file(tmp_path: Path) -> None:
    assert read_token({"token_env": "MY_TOK"}, {"MY_TOK": f" {SECRET}\n"}) == SECRET
    path = tmp_path / "tok"
    path.write_text(f"{SECRET}\nsecond line ignored\n")
    assert read_token({"token_file": str(path)}, {}) == SECRET
    assert read_token({}, {"MY_TOK": SECRET}) is None


@pytest.mark.parametrize(("values", "environ", "says"), [
    ({"token_env": "NOPE"}, {}, "--token-env NOPE: the variable is not set"),
    ({"token_env": "T"}, {"T": "  "}, "--token-env T: the token is empty"),
    ({"token_env": "T"}, {"T": f"two {SECRET}"}, "--token-env T: the token has spaces"),
    ({"token_env": "T"}, {"T": f"{SECRET}\u00e9"}, "non-ASCII"),
    ({"token_env": "T", "token_file": "/f"}, {"T": SECRET}, "give one of them"),
    ({"token_file": "/nonexistent/tok"}, {}, "--token-file /nonexistent/tok: cannot read: No such file"),
])
def test_token_refused_without_the_token(values: dict, environ: dict, says: str) -> None:
    with pytest.raises(UsageError, match=says) as err:
        read_token(values, environ)
    assert SECRET not in str(err.value)


def test_token_file_that_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=f"--token-file {tmp_path}: cannot read"):
        read_token({"token_file": str(tmp_path)}, {})
