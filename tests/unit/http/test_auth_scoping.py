"""Where each credential goes: ``access_from`` from option values, the request bytes per origin, a
redirect in the engine and in discovery's ``Fetcher`` (in memory), and what is never kept or shown."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.recording import HeaderRecorder

from dtune.config import resolve, show
from dtune.dataset import FileSpec
from dtune.discovery import FetchResult, discover
from dtune.engine import Engine
from dtune.engine.files import Replica
from dtune.engine.options import EngineOptions
from dtune.errors import UsageError
from dtune.http.access import Access
from dtune.http.auth import basic_auth
from dtune.http.client import Fetcher
from dtune.http.memory import MemoryNetwork
from dtune.http.message import Origin, split_url
from dtune.loop import run_async
from dtune.options import OPTIONS
from dtune.params import Params
from dtune.transfer import access_from, request_from

SECRET = "tok-9f8e7d6c5b4a"
PASSWORD = "pw-0a1b2c3d"
NAMED = Origin("http", "data.test", 80)


def headers_of(request: bytes) -> dict[str, str]:
    lines = request.decode("latin-1").split("\r\n")[1:]
    return {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}


def values(tmp_path: Path, **given: object) -> dict[str, object]:
    """Resolved option values as ``dtune get`` has them (no config file, a private HOME)."""
    got = resolve(OPTIONS, given=given, given_origin="argument", environ={}, use_config=False)
    return {name: v.value for name, v in got.items()}


def netrc(tmp_path: Path, text: str) -> str:
    path = tmp_path / "netrc"
    path.write_text(text)
    return str(path)


def test_nothing_configured_adds_nothing(tmp_path: Path) -> None:
    access, sources, _ = access_from(values(tmp_path), ["http://data.test/a"], [], {"HOME": str(tmp_path)})
    assert access.sources == [access.jar] and not access.jar and sources == ["http://data.test/a"]
    assert access.request("GET", NAMED, "/a") == Access().request("GET", NAMED, "/a")


def test_each_credential_where_it_belongs(tmp_path: Path) -> None:
    jar = tmp_path / "jar"
    jar.write_text(".data.test\tTRUE\t/\tFALSE\t0\tsid\tc1\n"
                   "cdn.test\tFALSE\t/files\tFALSE\t0\tcdn\tc2\n"
                   "data.test\tFALSE\t/\tTRUE\t0\tsecure\tc3\n")
    v = values(tmp_path, header=["X-Key: k1"], token_env="TOK", cookies=str(jar),
               netrc_file=netrc(tmp_path, f"machine cdn.test login n password {PASSWORD}\n"))
    access, sources, mirrors = access_from(v, [f"http://u:{PASSWORD}@data.test/d/"], ["http://mirror.test/d/"],
                                            {"TOK": SECRET})
    assert sources == ["http://data.test/d/"] and mirrors == ["http://mirror.test/d/"]
    named = headers_of(access.request("GET", NAMED, "/d/f"))
    # userinfo comes before the token: it names this very origin
    assert named["authorization"] == basic_auth("u", PASSWORD)
    assert named["x-key"] == "k1" and named["cookie"] == "sid=c1"
    mirror = headers_of(access.request("GET", Origin("http", "mirror.test", 80), "/d/f"))
    assert mirror["authorization"] == f"Bearer {SECRET}" and mirror["x-key"] == "k1" and "cookie" not in mirror
    # another port of the named host: another origin (no header, no token, no userinfo); the
    # cookie goes, as cookies are per host
    other_port = headers_of(access.request("GET", Origin("http", "data.test", 8080), "/d/f"))
    assert "authorization" not in other_port and "x-key" not in other_port and other_port["cookie"] == "sid=c1"
    # a host reached by a redirect: only what is scoped to it (its .netrc entry, its cookie and path)
    cdn = headers_of(access.request("GET", Origin("http", "cdn.test", 80), "/files/x"))
    assert cdn == {**cdn, "authorization": basic_auth("n", PASSWORD), "cookie": "cdn=c2"}
    assert "x-key" not in cdn
    assert "cookie" not in headers_of(access.request("GET", Origin("http", "cdn.test", 80), "/filesystem"))
    https = headers_of(access.request("GET", Origin("https", "data.test", 443), "/"))
    assert https["cookie"] == "sid=c1; secure=c3" and "authorization" not in https
    assert headers_of(access.request("GET", Origin("https", "www.data.test", 443), "/"))["cookie"] == "sid=c1"
    elsewhere = headers_of(access.request("GET", Origin("http", "evil.test", 80), "/d/f"))
    assert not {"authorization", "x-key", "cookie"} & set(elsewhere)


def test_trust_widens_the_named_origins(tmp_path: Path) -> None:
    access, _, _ = access_from(values(tmp_path, token_env="TOK"), ["http://data.test/"], [], {"TOK": SECRET})
    listed = Origin("https", "list.test", 443)
    assert "authorization" not in headers_of(access.request("GET", listed, "/f"))
    access.trust_url("https://list.test/f")
    assert headers_of(access.request("GET", listed, "/f"))["authorization"] == f"Bearer {SECRET}"


def test_first_source_wins_authorization(tmp_path: Path) -> None:
    n = netrc(tmp_path, f"machine data.test login n password {PASSWORD}\n")
    v = values(tmp_path, header=["Authorization: Custom abc"], token_env="TOK", netrc_file=n)
    access, _, _ = access_from(v, ["http://data.test/"], [], {"TOK": SECRET})
    sent = access.request("GET", NAMED, "/")
    assert headers_of(sent)["authorization"] == "Custom abc" and sent.count(b"Authorization") == 1
    access, _, _ = access_from(values(tmp_path, token_env="TOK", netrc_file=n), ["http://data.test/"], [],
                                {"TOK": SECRET})
    assert headers_of(access.request("GET", NAMED, "/"))["authorization"] == f"Bearer {SECRET}"
    access, _, _ = access_from(values(tmp_path, netrc_file=n), ["http://data.test/"], [], {})
    assert headers_of(access.request("GET", NAMED, "/"))["authorization"] == basic_auth("n", PASSWORD)
    access, _, _ = access_from(values(tmp_path, netrc_file=n, netrc=False), ["http://data.test/"], [], {})
    assert "authorization" not in headers_of(access.request("GET", NAMED, "/"))


def test_user_agent_header_replaces_dtunes(tmp_path: Path) -> None:
    access, _, _ = access_from(values(tmp_path, header=["user-agent: mine/2"]), ["http://data.test/"], [], {})
    sent = access.request("GET", NAMED, "/")
    assert sent.count(b"User-Agent") == 1 and headers_of(sent)["user-agent"] == "mine/2"


def test_default_netrc_from_home_and_its_warning(tmp_path: Path) -> None:
    (tmp_path / ".netrc").write_text(f"machine data.test login h password {PASSWORD}\n")
    access, _, _ = access_from(values(tmp_path), ["http://data.test/"], [], {"HOME": str(tmp_path)})
    assert headers_of(access.request("GET", NAMED, "/"))["authorization"] == basic_auth("h", PASSWORD)
    (tmp_path / ".netrc").write_text(f"machine data.test login h password {PASSWORD}\nmachin x\n")
    access, _, _ = access_from(values(tmp_path), ["http://data.test/"], [], {"HOME": str(tmp_path)})
    assert access.sources == [access.jar]
    assert access.warnings == [f"netrc file {tmp_path / '.netrc'}: line 2: a word where machine, default, "
                               "login, password, account or macdef belongs; not used"]
    with pytest.raises(UsageError, match="--netrc-file .*: line 2"):
        access_from(values(tmp_path, netrc_file=str(tmp_path / ".netrc")), ["http://data.test/"], [], {})


def test_plan_record_and_config_show_hold_no_secret(tmp_path: Path) -> None:
    got = resolve(OPTIONS, given={"header": [f"X-Key: {SECRET}"], "token_env": "TOK"}, given_origin="argument",
                  environ={}, use_config=False)
    plan = request_from([f"http://u:{PASSWORD}@data.test/d/"], str(tmp_path / "out"), got,
                      environ={"TOK": SECRET})
    assert plan.sources == ["http://data.test/d/"]
    text = json.dumps(plan.record(), default=str) + repr(plan)
    assert SECRET not in text and PASSWORD not in text
    shown = {key: value for key, value, _ in show(OPTIONS, got)}
    assert shown["header"] == "X-Key: ***" and shown["token-env"] == "TOK"


def test_bad_header_is_a_usage_error_at_plan_time(tmp_path: Path) -> None:
    got = resolve(OPTIONS, given={"header": ["Range: bytes=0-"]}, given_origin="argument", environ={},
                  use_config=False)
    with pytest.raises(UsageError, match="--header Range: dtune sets this header itself"):
        request_from(["http://data.test/"], str(tmp_path), got, environ={})


# -- discovery: the URLs of the user's URL list are user-named; a remote listing's are not -----


def test_discovery_trusts_url_list_urls_only(tmp_path: Path) -> None:
    listing = tmp_path / "urls.txt"
    listing.write_text("http://a.test/x.bin\thttp://b.test/x.bin\nhttps://c.test:8443/y.bin\n")
    pages = {"http://remote.test/d/": json.dumps([{"name": "z.bin", "type": "file", "size": 1,
                                                    "mtime": "Mon, 01 Jan 2024 00:00:00 GMT"}]).encode()}

    async def fetch(url: str, *, method: str = "GET", headers: dict | None = None,
                    max_bytes: int = 0) -> FetchResult:
        if url in pages:
            return FetchResult(200, {"content-type": "application/json"}, pages[url], url)
        return FetchResult(404, {}, b"", url)

    trusted: list[str] = []
    dataset = asyncio.run(discover([str(listing), "http://remote.test/d/"], fetch=fetch, trust=trusted.append))
    assert sorted(f.relpath for f in dataset.files) == ["x.bin", "y.bin", "z.bin"]
    assert trusted == ["http://a.test/x.bin", "http://b.test/x.bin", "https://c.test:8443/y.bin"]


# -- a redirect to another origin carries none of the named origin's credentials --------------


class MemoryRoute:
    """The ``Route`` of an ``Access`` whose connections go to a ``MemoryNetwork``."""

    def __init__(self, network: MemoryNetwork) -> None:
        self.network = network

    def proxied(self, origin: Origin) -> bool:
        return False

    async def connect(self, origin: Origin, *, timeout: float, ssl_context: object = None):
        return await self.network.connect(origin, timeout=timeout)


def redirecting_pair(tmp_path: Path) -> tuple[MemoryNetwork, HeaderRecorder, HeaderRecorder, Access]:
    """``named`` (the user's origin) redirects /f.bin to ``other``; the Access has every credential
    for ``named``: --header, a token, URL userinfo, a .netrc entry and a cookie for its host."""
    from support.fakeserver import Rule
    net = MemoryNetwork()
    named, other = HeaderRecorder({"/f.bin": b"x"}, network=net), HeaderRecorder({"/f.bin": b"y" * 5000}, network=net)
    named.start()
    other.start()
    named.rules["/f.bin"] = Rule(location=other.url("/f.bin"), methods=("GET", "HEAD"))
    host = split_url(named.base)[0].host
    jar = tmp_path / "jar"
    jar.write_text(f"{host}\tFALSE\t/\tFALSE\t0\tsid\t{SECRET}\n")
    v = values(tmp_path, header=[f"X-Key: {SECRET}"], token_env="TOK", cookies=str(jar),
               netrc_file=netrc(tmp_path, f"machine {host} login n password {PASSWORD}\n"))
    access, _, _ = access_from(v, [f"http://u:{PASSWORD}@{named.base[7:]}/f.bin"], [], {"TOK": SECRET})
    access.route = MemoryRoute(net)
    return net, named, other, access


def assert_clean(server: HeaderRecorder) -> None:
    assert server.seen
    for _, _, headers in server.seen:
        assert not {"authorization", "cookie", "x-key"} & set(headers), headers
        assert SECRET not in json.dumps(headers) and PASSWORD not in json.dumps(headers)


def test_engine_redirect_drops_credentials(tmp_path: Path) -> None:
    net, named, other, access = redirecting_pair(tmp_path)
    spec = FileSpec(url=named.url("/f.bin"), relpath="f.bin", size=5000)
    opts = EngineOptions(connect_timeout=2.0, stall_timeout=2.0, retries=1)

    async def main():
        engine = Engine([spec], [tmp_path / "out" / "f.bin"], Params(1, 1, 1), options=opts, access=access,
                        connect=net.connect)
        return await asyncio.wait_for(engine.run(), 20)

    result = run_async(main())
    assert result.ok and (tmp_path / "out" / "f.bin").read_bytes() == b"y" * 5000
    assert named.header_values("authorization") == [basic_auth("u", PASSWORD)]
    assert named.header_values("x-key") == [SECRET] and named.header_values("cookie") == [f"sid={SECRET}"]
    assert_clean(other)


def test_replica_move_changes_the_scope(tmp_path: Path) -> None:
    _, named, other, access = redirecting_pair(tmp_path)
    rep = Replica(named.url("/f.bin"))
    assert "authorization" in headers_of(access.request("GET", rep.origin, rep.target))
    rep.move(other.url("/f.bin"))
    assert not {"authorization", "cookie", "x-key"} & set(headers_of(access.request("GET", rep.origin, rep.target)))


def test_fetcher_redirect_drops_credentials(tmp_path: Path) -> None:
    _, named, other, access = redirecting_pair(tmp_path)

    async def main() -> FetchResult:
        fetcher = Fetcher(timeout=5, access=access)
        try:
            return await fetcher.fetch(named.url("/f.bin"), method="HEAD")
        finally:
            fetcher.close()

    res = run_async(main())
    assert res.status == 200 and res.url == other.url("/f.bin")
    assert named.header_values("authorization") == [basic_auth("u", PASSWORD)]
    assert_clean(other)


def test_url_list_userinfo_is_removed_and_not_used(tmp_path: Path) -> None:
    listing = tmp_path / "urls.txt"
    listing.write_text(f"http://u:{PASSWORD}@a.test/x.bin\thttp://v:{PASSWORD}@b.test/x.bin\n")

    async def fetch(url: str, **_: object) -> FetchResult:
        return FetchResult(404, {}, b"", url)

    trusted: list[str] = []
    dataset = asyncio.run(discover([str(listing)], fetch=fetch, trust=trusted.append))
    spec = dataset.files[0]
    assert (spec.url, spec.mirrors) == ("http://a.test/x.bin", ["http://b.test/x.bin"])
    assert trusted == ["http://a.test/x.bin", "http://b.test/x.bin"]
    assert dataset.warnings == [f"{listing}: user:password@ removed from 2 URL(s) and not used: credentials are "
                                "not read from a URL list or Metalink (give them in a .netrc, or with --token-file)"]
