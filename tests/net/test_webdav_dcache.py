"""``dtune get`` against a WebDAV door shaped like dCache's (``support.fakeserver.DavServer``): the
checksums it publishes in PROPFIND (its ``Checksums`` property) and in ``Digest`` answers to
``Want-Digest`` are verified, and hostile multistatus answers cost refusals, never a write
outside the output directory.

1. a tree listed with PROPFIND (``dav://``) whose files carry ``adler32=..,md5=..``: every file
   verified by md5 (the stronger), exit 0; one file's published md5 wrong: exit 1 naming it;
2. a single file (``dav://.../f``): its HEAD asks ``Want-Digest: adler32, md5, sha-256``, the
   answer's ``Digest: adler32=HEX`` verifies it; a wrong one fails it;
3. Basic credentials in the URL go with every PROPFIND and GET to the door, and never to
   another origin a listing names;
4. hostile listings: hrefs escaping the tree (``../``, ``%2e%2e``, another host), huge and
   negative sizes, duplicates → refusals with warnings, the rest fetched; DOCTYPE/entity tricks
   and absurd nesting → the directory is not listed, the run fails naming it, nothing written.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from support.fakeserver import DavServer
from support.harness import assert_exact, assert_failed, run_get, tree

REAL = ("--retries", "1", "--stall-timeout", "10")


def files() -> dict[str, bytes]:
    rng = random.Random(3230)
    return {"/store/run 1/a.root": rng.randbytes(200_000), "/store/run 1/b%.root": rng.randbytes(3000),
            "/store/\u00fcber/deep/er/c.root": rng.randbytes(70_001), "/store/top.txt": b"top\n"}


def expected() -> dict[str, bytes]:
    return {path.removeprefix("/store/"): data for path, data in files().items()}


def verified_by(outcome) -> dict[str, str | None]:
    return {e["file"]: e["checksum"] for e in outcome.of("file_done")}


def dav_url(srv: DavServer, path: str) -> str:
    return srv.url(path).replace("http://", "dav://", 1)


def test_checksums_in_propfind_verify_every_file_and_a_wrong_one_fails_it(env: dict, tmp_path: Path) -> None:
    with DavServer(files(), empty_dirs=("/store/empty",)) as srv:
        good = run_get(env, [dav_url(srv, "/store/")], tmp_path / "good", *REAL)
        srv.checksums["/store/run 1/a.root"] = "adler32=00000001,md5=" + "A" * 22 + "=="
        bad = run_get(env, [dav_url(srv, "/store/")], tmp_path / "bad", *REAL)
        propfinds = list(srv.propfinds)
    assert_exact(good, tmp_path / "good", expected())
    assert set(verified_by(good).values()) == {"md5 (dCache Checksums property)"}
    assert good.summary["files_by_checksum"] == len(expected())
    reason = assert_failed(bad, tmp_path / "bad", "run 1/a.root", ["md5 mismatch"])
    assert "dCache Checksums property" in reason
    assert all(depth == "1" and b"Checksums" in body for _, depth, body in propfinds)
    assert {p for p, _, _ in propfinds} >= {"/store/", "/store/run 1/", "/store/\u00fcber/deep/er/", "/store/empty/"}


def test_digest_answer_to_want_digest_verifies_a_single_file(env: dict, tmp_path: Path) -> None:
    with DavServer(files()) as srv:
        good = run_get(env, [dav_url(srv, "/store/run 1/a.root")], tmp_path / "good", *REAL)
        asked = [w for w in srv.want_digests if w]
        srv.digests["/store/top.txt"] = "adler32=0badc0de"
        bad = run_get(env, [dav_url(srv, "/store/top.txt")], tmp_path / "bad", *REAL)
    assert_exact(good, tmp_path / "good", {"a.root": files()["/store/run 1/a.root"]})
    assert verified_by(good) == {"a.root": "adler32 (Digest header)"}
    assert asked and asked[0] == "adler32, md5, sha-256"
    assert "adler32 mismatch" in assert_failed(bad, tmp_path / "bad", "top.txt", ["mismatch"])


def test_basic_credentials_go_to_the_door_and_to_no_other_origin(env: dict, tmp_path: Path) -> None:
    with DavServer({}) as other, DavServer(files(), user="alice", password="s3cret pw") as srv:
        srv.listings["/store/"] = srv.multistatus("/store/").replace(
            b"</d:multistatus>", f"<d:response><d:href>{other.base}/store/x.root</d:href></d:response>"
                                 f"</d:multistatus>".encode())
        srv.files["/store/x.root"] = b"x"  # (listed on the other origin only)
        url = dav_url(srv, "/store/").replace("dav://", "dav://alice:s3cret%20pw@")
        out = run_get(env, [url], tmp_path / "out", *REAL)
        denied = run_get(env, [dav_url(srv, "/store/")], tmp_path / "denied", *REAL)
        seen, elsewhere = list(srv.authorizations), list(other.requests)
    assert_exact(out, tmp_path / "out", expected())
    assert any("refusing" in e["reason"] and "x.root" in e["reason"] for e in out.of("warning"))
    assert elsewhere == []
    assert seen[:1] == [srv.auth] and seen.count(srv.auth) >= len(expected()) + 3
    assert denied.code == 1 and "401" in denied.stderr + denied.stdout
    assert "s3cret" not in out.stdout + out.stderr + denied.stdout + denied.stderr


def hostile_listing(base: str) -> bytes:
    def member(href: str, size: str = "1", collection: bool = False) -> str:
        kind = "<d:resourcetype><d:collection/></d:resourcetype>" if collection else "<d:resourcetype/>"
        return (f"<d:response><d:href>{href}</d:href><d:propstat><d:prop>{kind}"
                f"<d:getcontentlength>{size}</d:getcontentlength></d:prop>"
                "<d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>")
    return ('<d:multistatus xmlns:d="DAV:">' + member("/store/", collection=True)
            + member("/store/../outside.txt") + member("/store/%2e%2e/outside2.txt") + member("/store/..%2Foutside3")
            + member("/etc/passwd") + member("http://example.invalid/store/evil.txt")
            + member("/store/huge.bin", "9" * 40) + member("/store/negative.bin", "-3")
            + member("/store/top.txt", "4") + member("/store/top.txt", "4") + member(f"{base}/store/top.txt", "4")
            + member("/store/sub/", collection=True) + member("/store/", collection=True)
            + "</d:multistatus>").encode()


def test_hostile_members_are_refused_with_warnings_and_nothing_leaves_the_output(env: dict, tmp_path: Path) -> None:
    data = {"/store/top.txt": b"top\n", "/store/sub/in.txt": b"in\n", "/store/huge.bin": b"h",
            "/store/negative.bin": b"n", "/outside.txt": b"secret\n", "/etc/passwd": b"root\n"}
    out = tmp_path / "box" / "out"
    out.parent.mkdir()
    with DavServer(data) as srv:
        srv.listings["/store/"] = hostile_listing(srv.base)
        outcome = run_get(env, [dav_url(srv, "/store/")], out, *REAL)
        asked = {r.path for r in srv.requests if r.method == "GET"}
    assert_exact(outcome, out, {"top.txt": b"top\n", "sub/in.txt": b"in\n"})
    warnings = " ".join(e["reason"] for e in outcome.of("warning"))
    for name in ("outside.txt", "outside2.txt", "outside3", "/etc/passwd", "evil.txt", "huge.bin", "negative.bin"):
        assert name in warnings, name
    assert asked == {"/store/top.txt", "/store/sub/in.txt"}
    assert sorted(os.listdir(tmp_path / "box")) == ["out"]


@pytest.mark.parametrize("body", [
    b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    b'<d:multistatus xmlns:d="DAV:"><d:response><d:href>/store/&x;</d:href></d:response></d:multistatus>',
    b'<!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
    b'<d:multistatus xmlns:d="DAV:"><d:response><d:href>/store/&b;</d:href></d:response></d:multistatus>',
    b'<d:multistatus xmlns:d="DAV:">' + b"<d:x>" * 5000 + b"</d:x>" * 5000 + b"</d:multistatus>",
    b"<html>not a multistatus</html>",
], ids=["external-entity", "entity-expansion", "deep-nesting", "not-multistatus"])
def test_tricky_documents_fail_the_directory_that_sent_them(env: dict, tmp_path: Path, body: bytes) -> None:
    with DavServer(files()) as srv:
        srv.listings["/store/run 1/"] = body
        outcome = run_get(env, [dav_url(srv, "/store/")], tmp_path / "out", *REAL)
    assert outcome.code == 1, (outcome.stdout[-2000:], outcome.stderr)
    text = outcome.stdout + outcome.stderr
    assert "PROPFIND answer" in text and "root:" not in text
    got = tree(tmp_path / "out") if (tmp_path / "out").exists() else {}
    assert not any(rel.startswith("run 1/") for rel in got)
    assert got.get("top.txt") == b"top\n"  # (the rest of the tree is still fetched)
