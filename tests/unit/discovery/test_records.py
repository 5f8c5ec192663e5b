"""DOI records, pure parts: which sources are DOIs or record pages, landing pages told apart by
shape, and each repository's JSON read into files."""

from __future__ import annotations

import pytest

from dtune.discovery.catalogs import claim
from dtune.discovery.records import (
    check_doi,
    dataverse_files,
    doi_of,
    figshare_files,
    figshare_from_doi,
    landing,
    zenodo_files,
)
from dtune.errors import DiscoveryError, UsageError

API = "https://api.figshare.com"


@pytest.mark.parametrize(("source", "doi"), [
    ("doi:10.5281/zenodo.123", "10.5281/zenodo.123"), ("DOI: 10.5281/zenodo.123", "10.5281/zenodo.123"),
    ("https://doi.org/10.7910/DVN/ABC", "10.7910/DVN/ABC"), ("http://dx.doi.org/10.1000%2Fx", "10.1000/x"),
    ("https://example.org/10.5281/zenodo.1", None), ("doi:11.1/x", None), ("doi:", None),
])
def test_doi_of(source, doi):
    assert doi_of(source) == doi


@pytest.mark.parametrize(("source", "kind"), [
    ("doi:10.5281/zenodo.1", "doi"), ("doi:nonsense", "doi"), ("https://zenodo.org/records/12", "record"),
    ("https://zenodo.org/record/12/", "record"), ("https://figshare.com/articles/dataset/t/5/1", "record"),
    ("https://h/articles/dataset/t/5/1", None), ("https://dv.org/dataset.xhtml?persistentId=doi:10.1/X", "record"),
    ("https://h/thredds/catalog/a/catalog.xml", "thredds"), ("https://h/x/catalog.html", "thredds"),
    ("https://h/thredds/catalog/a/other.xml", "thredds"), ("https://h/data/file.xml", None),
    ("https://h/thredds/fileServer/a/data.xml", None),
    ("https://h/records/12/file.bin", None), ("s3://b/k", None),
])
def test_claim(source, kind):
    assert claim(source) == kind


@pytest.mark.parametrize(("url", "api"), [
    ("https://zenodo.org/records/12", "https://zenodo.org/api/records/12"),
    ("https://figshare.com/articles/dataset/some_title/123/2", f"{API}/v2/articles/123/versions/2"),
    ("https://figshare.com/articles/dataset/some_title/123", f"{API}/v2/articles/123"),
    ("https://figshare.com/articles/123", f"{API}/v2/articles/123"),
    ("https://dv.org/citation?persistentId=doi:10.7910/DVN/X",
     "https://dv.org/api/datasets/:persistentId/?persistentId=doi:10.7910/DVN/X"),
])
def test_landing_pages_name_their_api(url, api):
    found = landing(url, API)
    assert found is not None and found.api == api


def test_figshare_dois_name_the_article_and_version():
    assert figshare_from_doi("10.6084/m9.figshare.77.v3", API).api == f"{API}/v2/articles/77/versions/3"
    assert figshare_from_doi("10.6084/m9.figshare.77", API).api == f"{API}/v2/articles/77"
    assert figshare_from_doi("10.5281/zenodo.77", API) is None


ZEN = landing("https://zenodo.org/records/5", API)


def test_zenodo_files_with_md5_and_download_links():
    doc = {"metadata": {"access_right": "open"}, "files": [
        {"key": "a.nc", "size": 10, "checksum": "md5:" + "A" * 32,
         "links": {"self": "https://zenodo.org/api/records/5/files/a.nc/content"}},
        {"key": "b c.nc", "size": 3, "checksum": "md5:" + "b" * 32, "links": {}}]}
    files = zenodo_files(doc, ZEN)
    assert [(f.name, f.url, f.size, f.checksum.hex) for f in files] == [
        ("a.nc", "https://zenodo.org/api/records/5/files/a.nc/content", 10, "a" * 32),
        ("b c.nc", "https://zenodo.org/api/records/5/files/b%20c.nc/content", 3, "b" * 32)]
    assert not any(f.restricted for f in files)
    assert all(f.restricted for f in zenodo_files({**doc, "metadata": {"access_right": "restricted"}}, ZEN))


def test_figshare_prefers_computed_md5_and_sets_link_only_files_aside():
    fig = landing("https://figshare.com/articles/1", API)
    doc = {"files": [{"name": "a", "size": 1, "computed_md5": "c" * 32, "supplied_md5": "d" * 32,
                      "download_url": "https://ndownloader.figshare.com/files/1"},
                     {"name": "b", "size": 1, "computed_md5": "", "supplied_md5": "d" * 32,
                      "download_url": "https://ndownloader.figshare.com/files/2"},
                     {"name": "l", "is_link_only": True, "download_url": "https://elsewhere/x"}]}
    files, links = figshare_files(doc, fig)
    assert [f.checksum.hex for f in files] == ["c" * 32, "d" * 32] and links == ["l"]


def test_dataverse_original_of_a_tabular_file_and_directory_labels():
    dv = landing("https://dv.org/dataset.xhtml?persistentId=doi:10.1/X", API)
    doc = {"data": {"latestVersion": {"files": [
        {"directoryLabel": "a/b/", "restricted": True,
         "dataFile": {"id": 4, "filename": "t.tab", "filesize": 9, "originalFileName": "t.sav",
                      "originalFileFormat": "application/x-spss-sav", "originalFileSize": 100,
                      "checksum": {"type": "SHA-1", "value": "e" * 40}}}]}}}
    (item,) = dataverse_files(doc, dv)
    assert (item.name, item.url, item.size, item.checksum.algo, item.restricted) == (
        "a/b/t.sav", "https://dv.org/api/access/datafile/4?format=original", 100, "sha1", True)


@pytest.mark.parametrize("doc", [[], {"files": "x"}, {"files": [{"size": 1}]}, {"files": [7]}])
def test_malformed_answers_are_discovery_errors(doc):
    with pytest.raises(DiscoveryError):
        zenodo_files(doc, ZEN)


def test_a_doi_source_that_is_no_doi_is_a_usage_error_naming_it():
    with pytest.raises(UsageError, match="doi:nonsense: not a DOI"):
        check_doi("doi:nonsense")
    assert check_doi("doi:10.5281/zenodo.5") == "10.5281/zenodo.5"
