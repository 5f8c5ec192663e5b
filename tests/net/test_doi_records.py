"""DOI records fetched end to end: a local DOI resolver and local fakes of the Zenodo, figshare and
Dataverse APIs (``support.records``: JSON in the shapes their documentation gives), the files
they list compared byte for byte with what dtune wrote."""

from __future__ import annotations

import hashlib
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.records import Answer, RecordsServer, json_body

import dtune
from dtune.errors import DtuneError

RNG = random.Random(11)
DATA = {"a.bin": RNG.randbytes(300 * 1024), "notes.txt": b"zenodo notes\n", "bad.bin": RNG.randbytes(5000),
        "x.csv": b"a,b\n1,2\n", "t.csv": b"c,d\n3,4\n" * 100, "secret.dat": b"restricted bytes"}


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture
def out() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dtune-records-"))
    yield path / "out"
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def srv() -> Iterator[RecordsServer]:
    with RecordsServer() as server:
        yield server


def zenodo(srv: RecordsServer, record: int, names: list[str], *, wrong: str | None = None) -> None:
    files = []
    for name in names:
        data = DATA.get(name, b"hostile")
        path = f"/api/records/{record}/files/{name}/content"
        srv.file(path, data)
        files.append({"key": name, "size": len(data), "links": {"self": srv.url(path)},
                      "checksum": "md5:" + (md5(b"other") if name == wrong else md5(data))})
    srv.route(f"/api/records/{record}", json_body({"id": record, "metadata": {"access_right": "open"},
                                                   "files": files}))
    srv.redirect(f"/10.5281/zenodo.{record}", srv.url(f"/records/{record}"))


def get(source: str, out: Path, srv: RecordsServer, **options: object) -> dtune.Result:
    return dtune.get(source, out, doi_resolver=srv.origin + "/", figshare_api=srv.origin, no_history=True,
                     retries=3, **options)


def test_zenodo_doi_through_the_resolver_waits_out_a_429_and_fetches_every_file_exactly(srv, out):
    zenodo(srv, 7, ["a.bin", "notes.txt"])
    srv.limit("/api/records/7", times=1, retry_after=1)
    began = time.monotonic()
    result = get("doi:10.5281/zenodo.7", out, srv)
    assert result.ok, result.failed
    assert time.monotonic() - began >= 0.9   # the Retry-After was waited out
    assert srv.hits["/api/records/7"] == 2   # the 429, then the listing
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {n: DATA[n] for n in ("a.bin", "notes.txt")}
    assert ("HEAD", "/10.5281/zenodo.7", None) in srv.methods
    assert srv.hits["/records/7"] == 0       # the resolver's redirect is read, not followed
    assert all(f.checksum and f.checksum.startswith("md5") for f in result.files)


def test_zenodo_record_page_and_doi_org_url_name_the_same_record(srv, out):
    zenodo(srv, 8, ["notes.txt"])
    result = get(srv.url("/record/8"), out, srv)
    assert result.ok and (out / "notes.txt").read_bytes() == DATA["notes.txt"]
    shutil.rmtree(out)
    result = get("https://doi.org/10.5281/zenodo.8", out, srv)   # asked of the configured resolver
    assert result.ok and (out / "notes.txt").read_bytes() == DATA["notes.txt"]
    assert srv.hits["/10.5281/zenodo.8"] == 1


def test_a_wrong_md5_fails_that_file_by_name_and_the_others_arrive(srv, out):
    zenodo(srv, 9, ["notes.txt", "bad.bin"], wrong="bad.bin")
    result = get("doi:10.5281/zenodo.9", out, srv)
    assert not result.ok
    assert [f.relpath for f in result.failed] == ["bad.bin"]
    assert "md5" in (result.failed[0].error or "").lower()
    assert (out / "notes.txt").read_bytes() == DATA["notes.txt"]
    assert not (out / "bad.bin").exists()


def test_hostile_names_in_a_record_are_refused_and_nothing_leaves_the_output_directory(srv, out):
    zenodo(srv, 10, ["notes.txt", "../x", "/abs"])
    events: list[dict] = []
    result = get("doi:10.5281/zenodo.10", out, srv, progress=events.append)
    assert (out / "notes.txt").read_bytes() == DATA["notes.txt"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]
    assert not Path("/abs").exists()
    warnings = " ".join(e.get("reason", "") for e in events if e.get("event") == "warning")
    assert "'../x'" in warnings and "'/abs'" in warnings
    assert result.ok   # (refused at listing: the files asked for are the record's safe ones)


def figshare(srv: RecordsServer) -> None:
    files = []
    for i, name in enumerate(["a.bin", "notes.txt"]):
        srv.file(f"/ndownloader/files/{i}", DATA[name])
        files.append({"id": i, "name": name, "size": len(DATA[name]), "computed_md5": md5(DATA[name]),
                      "download_url": srv.url(f"/ndownloader/files/{i}"), "is_link_only": False})
    files.append({"id": 9, "name": "elsewhere", "size": 0, "computed_md5": "", "is_link_only": True,
                  "download_url": "https://example.org/x"})
    srv.route("/v2/articles/123/versions/2", json_body({"id": 123, "version": 2, "files": files}))
    srv.redirect("/10.25919/fig.123", srv.url("/articles/dataset/some_title/123/2"))


def test_figshare_article_through_the_resolver_and_by_its_own_doi(srv, out):
    figshare(srv)
    events: list[dict] = []
    result = get("doi:10.25919/fig.123", out, srv, progress=events.append)
    assert result.ok, result.failed
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {n: DATA[n] for n in ("a.bin", "notes.txt")}
    assert any("'elsewhere'" in e.get("reason", "") for e in events if e.get("event") == "warning")
    shutil.rmtree(out)
    result = get("doi:10.6084/m9.figshare.123.v2", out, srv)   # no resolver asked
    assert result.ok and (out / "a.bin").read_bytes() == DATA["a.bin"]
    assert srv.hits["/10.6084/m9.figshare.123.v2"] == 0
    assert srv.hits["/v2/articles/123/versions/2"] == 2


PID = "doi:10.7910/DVN/ABC"


def dataverse(srv: RecordsServer) -> None:
    srv.file("/api/access/datafile/11", DATA["x.csv"])
    srv.file("/api/access/datafile/12?format=original", DATA["t.csv"])
    srv.file("/api/access/datafile/12", b"c\td\n3\t4\n")          # the converted form: must not be taken
    srv.file("/api/access/datafile/13", DATA["secret.dat"], token="Bearer sesame")
    files = [
        {"label": "x.csv", "directoryLabel": "data/raw", "restricted": False,
         "dataFile": {"id": 11, "filename": "x.csv", "filesize": len(DATA["x.csv"]), "md5": md5(DATA["x.csv"])}},
        {"label": "t.tab", "directoryLabel": "tables", "restricted": False,
         "dataFile": {"id": 12, "filename": "t.tab", "filesize": 9, "originalFileName": "t.csv",
                      "originalFileFormat": "text/csv", "originalFileSize": len(DATA["t.csv"]),
                      "checksum": {"type": "MD5", "value": md5(DATA["t.csv"])}}},
        {"label": "secret.dat", "restricted": True,
         "dataFile": {"id": 13, "filename": "secret.dat", "filesize": len(DATA["secret.dat"])}},
    ]
    srv.route(f"/api/datasets/:persistentId/?persistentId={PID}",
              json_body({"status": "OK", "data": {"latestVersion": {"files": files}}}))
    srv.redirect("/10.7910/DVN/ABC", srv.url(f"/dataset.xhtml?persistentId={PID}"))


def test_dataverse_dataset_keeps_directories_takes_originals_and_fails_restricted_files_by_name(srv, out):
    dataverse(srv)
    result = get("doi:10.7910/DVN/ABC", out, srv)
    assert (out / "data/raw/x.csv").read_bytes() == DATA["x.csv"]
    assert (out / "tables/t.csv").read_bytes() == DATA["t.csv"]
    assert not (out / "secret.dat").exists()
    assert not result.ok and [f.relpath for f in result.failed] == ["secret.dat"]
    assert "restricted" in (result.failed[0].error or "")


def test_dataverse_page_url_is_a_source_too(srv, out):
    dataverse(srv)
    result = get(srv.url(f"/dataset.xhtml?persistentId={PID}"), out, srv, exclude=["secret.dat"])
    assert (out / "tables/t.csv").read_bytes() == DATA["t.csv"]
    assert result.ok, result.failed


def test_a_doi_landing_on_an_unknown_page_fails_naming_it(srv, out):
    srv.redirect("/10.1234/other", srv.url("/some/page"))
    srv.route("/some/page", Answer(200, b"<html></html>", {"Content-Type": "text/html"}))
    with pytest.raises(DtuneError, match=r"doi:10.1234/other.*/some/page.*not a Zenodo record"):
        get("doi:10.1234/other", out, srv)


def test_an_unknown_doi_says_the_resolver_does_not_know_it(srv, out):
    with pytest.raises(DtuneError, match=r"doi:10.1234/nothing.*does not know it"):
        get("doi:10.1234/nothing", out, srv)


def test_a_restricted_file_is_fetched_when_credentials_make_it_readable(srv, out):
    dataverse(srv)
    result = get(srv.url(f"/dataset.xhtml?persistentId={PID}"), out, srv, header=["Authorization: Bearer sesame"])
    assert result.ok, result.failed
    assert (out / "secret.dat").read_bytes() == DATA["secret.dat"]


def test_the_command_line_exits_1_naming_a_restricted_file_and_0_without_it(srv, out, env):
    dataverse(srv)
    base = [sys.executable, "-m", "dtune", "get", "doi:10.7910/DVN/ABC", "--doi-resolver", srv.origin,
            "-o", str(out), "--no-history", "--no-progress"]
    done = subprocess.run(base, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "secret.dat" in done.stderr and "restricted" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([*base, "--exclude", "secret.dat"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "data/raw/x.csv").read_bytes() == DATA["x.csv"]
