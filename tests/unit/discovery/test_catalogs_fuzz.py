"""Property tests of the THREDDS and DOI-record parsers: any bytes or JSON give files or a
DiscoveryError, never another exception, and every name discovery keeps stays inside."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.discovery.manifest import load_json
from dtune.discovery.paths import relpath_problem, resolve_inside
from dtune.discovery.records import dataverse_files, figshare_files, landing, zenodo_files
from dtune.discovery.thredds import parse_catalog
from dtune.errors import DiscoveryError

pytestmark = pytest.mark.fuzz

URL = "http://h/thredds/catalog/catalog.xml"
API = "https://api.figshare.com"
LANDINGS = {"zenodo": landing("https://zenodo.org/records/1", API),
            "figshare": landing("https://figshare.com/articles/1", API),
            "dataverse": landing("https://dv.org/dataset.xhtml?persistentId=doi:10.1/X", API)}
NAMES = st.sampled_from(["a.nc", "../x", "/abs", "a/../../b", "", ".", "d/e.nc", "c:\\x", "ü n", "\x00"])
TAGS = st.sampled_from(["catalog", "service", "dataset", "access", "catalogRef", "metadata", "serviceName",
                        "dataSize"])
ATTRS = st.dictionaries(st.sampled_from(["name", "serviceType", "base", "urlPath", "serviceName", "xlink:href",
                                         "units", "inherited"]),
                        st.one_of(NAMES, st.sampled_from(["HTTPServer", "Compound", "OPeNDAP", "true", "Kbytes",
                                                          "http://h/", "sub/catalog.xml", "1e400"])), max_size=4)
NS = 'xmlns="http://www.unidata.ucar.edu/namespaces/thredds/InvCatalog/v1.0" xmlns:xlink="http://www.w3.org/1999/xlink"'


@st.composite
def catalogs(draw, depth: int = 0) -> str:
    tag = draw(TAGS)
    attrs = " ".join(f'{k}="{json.dumps(v)[1:-1].replace("&", "&amp;").replace("<", "&lt;")}"'
                     for k, v in draw(ATTRS).items() if "\x00" not in v and "\\" not in v)
    children = "".join(draw(st.lists(catalogs(depth + 1), max_size=3))) if depth < 3 else draw(NAMES).replace("\x00", "")
    return f"<{tag} {attrs}>{children}</{tag}>"


def names_stay_inside(names: list[str], tmp: str = "/tmp/dtune-fuzz-out") -> None:
    for name in names:
        relpath, _ = relpath_problem(name)
        if relpath is not None:
            assert str(resolve_inside(tmp, relpath)).startswith(tmp + "/")


@FUZZ
@given(st.binary(max_size=2000))
def test_thredds_random_bytes(body):
    try:
        catalog = parse_catalog(body, URL)
    except DiscoveryError:
        return
    names_stay_inside([f.path for f in catalog.files])


@FUZZ
@given(catalogs())
def test_thredds_random_catalogues(inner):
    try:
        catalog = parse_catalog(f"<catalog {NS}>{inner}</catalog>".encode(), URL)
    except DiscoveryError:
        return
    names_stay_inside([f.path for f in catalog.files])
    assert all(f.url.startswith(("http://", "https://")) for f in catalog.files)
    assert all(f.size_hint is None or f.size_hint >= 0 for f in catalog.files)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | NAMES | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["files", "key", "name", "size", "checksum", "links", "self", "content",
                                         "download_url", "computed_md5", "data", "latestVersion", "dataFile", "id",
                                         "filename", "filesize", "md5", "directoryLabel", "restricted", "metadata",
                                         "access_right", "originalFileSize", "originalFileFormat", "type",
                                         "value", "is_link_only"]), inner, max_size=5), max_leaves=30)


@FUZZ
@given(st.sampled_from(sorted(LANDINGS)), JSON)
def test_record_parsers_random_json(kind, doc):
    place = LANDINGS[kind]
    try:
        if kind == "zenodo":
            files = zenodo_files(doc, place)
        elif kind == "figshare":
            files = figshare_files(doc, place)[0]
        else:
            files = dataverse_files(doc, place)
    except DiscoveryError:
        return
    names_stay_inside([f.name for f in files])
    assert all(f.url.startswith(("http://", "https://")) for f in files)


@FUZZ
@given(st.sampled_from(sorted(LANDINGS)), st.binary(max_size=500))
def test_record_parsers_random_bytes(kind, body):
    try:
        doc = load_json(body, "src", "API answer")
        if kind == "zenodo":
            zenodo_files(doc, LANDINGS[kind])
        elif kind == "figshare":
            figshare_files(doc, LANDINGS[kind])
        else:
            dataverse_files(doc, LANDINGS[kind])
    except DiscoveryError:
        pass
