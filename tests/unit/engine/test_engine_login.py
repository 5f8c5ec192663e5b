"""The engine's many requests meet a login (NASA Earthdata Login's shape) at once: one walks it,
the others wait for its cookie; in memory, two origins on one ``MemoryNetwork``.

The data origin answers a request without its session cookie with 302 to the
auth origin's ``/oauth/authorize?...&state=PATH``, which (with the Basic
credentials of a .netrc entry for its host) sends the client to the data
origin's ``/login?code=...&state=PATH``; that sets the cookie and sends it back
to PATH. The engine starts with every file's size known (no discovery signs in
first), so its lanes all meet the redirect together.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import parse_qs, urlencode

from support.engine import FAST, blob
from support.fakeserver import FakeServer
from support.fakeserver.core import Exchange

from dtune.dataset import FileSpec
from dtune.engine import Engine
from dtune.errors import HTTPError
from dtune.http.access import Access
from dtune.http.auth import NetrcAuth, NetrcEntry, basic_auth
from dtune.http.client import MAX_REDIRECTS, Fetcher
from dtune.http.cookies import CookieJar
from dtune.http.memory import MemoryNetwork
from dtune.loop import run_async
from dtune.params import Params

FILES = {f"/f{i}.bin": blob(300_000 if i % 4 == 0 else 5_000 + i) for i in range(16)}


class Auth(FakeServer):
    logins = 0

    async def answer(self, exchange: Exchange) -> bool:
        if exchange.headers.get("authorization") != basic_auth("u", "p"):
            return exchange.simple(401, {"WWW-Authenticate": 'Basic realm="URS"'})
        self.logins += 1
        query = parse_qs(exchange.request.query)
        back = query["redirect_uri"][0] + "?" + urlencode({"code": "c0de", "state": query["state"][0]})
        return exchange.simple(302, {"Location": back})


class Data(FakeServer):
    auth = ""
    expires = "Max-Age=3600"

    async def answer(self, exchange: Exchange) -> bool:
        req = exchange.request
        if req.path == "/login":
            state = parse_qs(req.query)["state"][0]
            return exchange.simple(302, {"Location": self.url(state),
                                         "Set-Cookie": f"session=s3cr3t; Path=/; {self.expires}"})
        if "session=s3cr3t" not in exchange.headers.get("cookie", ""):
            return exchange.simple(302, {"Location": f"{self.auth}/oauth/authorize?" + urlencode(
                {"redirect_uri": self.base + "/login", "state": req.path})})
        return await super().answer(exchange)


class InMemory:
    """The route of an ``Access`` whose connections are the ``MemoryNetwork``'s (the login's walk
    opens its own, through the ``Access``, as the engine's do)."""

    def __init__(self, network: MemoryNetwork) -> None:
        self.connect = network.connect

    def proxied(self, origin: object) -> bool:
        return False

    def proxy_headers(self, origin: object) -> None:
        return None


def run(tmp_path: Path, netrc: bool) -> tuple[Data, Auth, object, CookieJar]:
    network = MemoryNetwork()
    auth = Auth(network=network)
    data = Data(dict(FILES), network=network)
    data.auth = auth.base
    jar = CookieJar()
    sources = [NetrcAuth([NetrcEntry(auth.host, "u", "p")])] if netrc else []  # (for the auth host)
    access = Access(sources, jar=jar, route=InMemory(network))
    specs = [FileSpec(url=data.url(p), relpath=p[1:], size=len(b)) for p, b in FILES.items()]
    out = tmp_path / "out"

    async def main() -> object:
        engine = Engine(specs, [out / s.relpath for s in specs], Params(4, 4, 2), options=FAST,
                        access=access)
        return await asyncio.wait_for(engine.run(), 30)

    with auth, data:
        result = run_async(main())
    return data, auth, result, jar


def test_sixteen_lanes_meet_the_login_and_only_one_walks_it(tmp_path: Path) -> None:
    data, auth, result, jar = run(tmp_path, True)
    assert result.ok, [(f.relpath, f.error) for f in result.files if f.error]
    for path, body in FILES.items():
        assert (tmp_path / "out" / path[1:]).read_bytes() == body
    assert auth.logins == 1 and len(auth.requests) == 1
    assert [c.name for c in jar.cookies()] == ["session"]
    assert len([r for r in data.requests if r.path == "/login"]) == 1


def test_a_login_refused_fails_each_file_with_the_ways_to_give_credentials(tmp_path: Path) -> None:
    _, auth, result, _ = run(tmp_path, False)
    assert not result.ok and auth.logins == 0
    errors = {f.error for f in result.files}
    assert len(auth.requests) == 1, "one walk, whose failure every waiting request shares"
    assert all("answered 401" in e and f"machine {auth.host} login" in e for e in errors), errors


class RefusedCookie(Data):
    """A data origin whose session cookie names a Domain the host may not set (RFC 6265 refuses it)."""

    async def answer(self, exchange: Exchange) -> bool:
        req = exchange.request
        if req.path == "/login":
            state = parse_qs(req.query)["state"][0]
            return exchange.simple(302, {"Location": self.url(state), "Set-Cookie": "session=s3cr3t; Domain=test"})
        return await super().answer(exchange)


def test_a_login_whose_cookie_cannot_be_kept_ends_saying_so() -> None:
    network = MemoryNetwork()
    auth = Auth(network=network)
    data = RefusedCookie(dict(FILES), network=network)
    data.auth = auth.base
    access = Access([NetrcAuth([NetrcEntry(auth.host, "u", "p")])], jar=CookieJar(), route=InMemory(network))

    async def main() -> str:
        fetcher = Fetcher(access=access)
        try:
            await fetcher.fetch(data.url("/f1.bin"), method="HEAD")
        except HTTPError as exc:
            return str(exc)
        finally:
            fetcher.close()
        return "no error"

    with auth, data:
        said = run_async(main())
    assert "more than 5 redirects (a login loop?" in said and "could not be kept" in said, said
    assert "s3cr3t" not in said
    # two walks (MAX_LOGINS), then the redirects are followed as any other until their limit ends them
    assert 2 < auth.logins <= 2 + MAX_REDIRECTS


class FormAuth(FakeServer):
    """An auth host that shows browsers its login form instead of asking for Basic credentials."""

    async def answer(self, exchange: Exchange) -> bool:
        return exchange.simple(200, {"Content-Type": "text/html; charset=utf-8"}, b"<form>login</form>\n")


def test_a_login_form_is_not_taken_for_the_file(tmp_path: Path) -> None:
    network = MemoryNetwork()
    auth = FormAuth(network=network)
    data = Data(dict(FILES), network=network)
    data.auth = auth.base
    access = Access([], jar=CookieJar(), route=InMemory(network))
    specs = [FileSpec(url=data.url("/f1.bin"), relpath="f1.bin", size=len(FILES["/f1.bin"]))]

    async def main() -> object:
        engine = Engine(specs, [tmp_path / "f1.bin"], Params(1, 1, 1), options=FAST, access=access)
        return await asyncio.wait_for(engine.run(), 30)

    with auth, data:
        result = run_async(main())
    [f] = result.files
    assert f.status == "failed" and "answered a web page (a login form?)" in f.error
    assert f"machine {auth.host} login" in f.error and not (tmp_path / "f1.bin").exists()
