"""The THREDDS catalogue parser on plain documents, and the catalogue walk's bounds (catalogRef
loops, depth, catalogue count, origin) over an in-memory web."""

from __future__ import annotations

import asyncio

import pytest

from dtune.discovery import FetchResult, discover
from dtune.discovery.thredds import NotACatalog, parse_catalog
from dtune.errors import DiscoveryError

NS = 'xmlns="http://www.unidata.ucar.edu/namespaces/thredds/InvCatalog/v1.0" xmlns:xlink="http://www.w3.org/1999/xlink"'
URL = "http://h/thredds/catalog/x/catalog.xml"


def doc(inner: str) -> bytes:
    return f'<?xml version="1.0"?><catalog {NS}>{inner}</catalog>'.encode()


HTTP = '<service name="http" serviceType="HTTPServer" base="/thredds/fileServer/"/>'


@pytest.mark.parametrize(("dataset", "expected"), [
    ('<dataset name="a" urlPath="d/a.nc" serviceName="http"/>', "http://h/thredds/fileServer/d/a.nc"),
    ('<dataset name="a" urlPath="/d/a.nc" serviceName="http"/>', "http://h/thredds/fileServer/d/a.nc"),
    ('<dataset name="a" urlPath="d/a b.nc"><serviceName>http</serviceName></dataset>',
     "http://h/thredds/fileServer/d/a%20b.nc"),
    ('<dataset name="a"><access serviceName="http" urlPath="d/a.nc"/></dataset>',
     "http://h/thredds/fileServer/d/a.nc"),
    ('<dataset name="c"><metadata inherited="true"><serviceName>http</serviceName></metadata>'
     '<dataset name="x"><dataset name="a" urlPath="d/a.nc"/></dataset></dataset>', "http://h/thredds/fileServer/d/a.nc"),
])
def test_each_way_of_naming_the_file_service_gives_the_file_url(dataset, expected):
    catalog = parse_catalog(doc(HTTP + dataset), URL)
    assert [f.url for f in catalog.files] == [expected]


def test_a_compound_service_is_expanded_and_other_services_are_only_counted():
    body = doc('<service name="all" serviceType="Compound" base=""><service name="o" serviceType="OPeNDAP" '
               'base="/dods/"/><service name="f" serviceType="HTTPServer" base="http://files.h/fs/"/></service>'
               '<service name="wms" serviceType="WMS" base="/wms/"/>'
               '<dataset name="a" urlPath="a.nc" serviceName="all"/><dataset name="b" urlPath="b.nc" serviceName="wms"/>'
               '<dataset name="collection"/>')
    catalog = parse_catalog(body, URL)
    assert [f.url for f in catalog.files] == ["http://files.h/fs/a.nc"]
    assert catalog.skipped == 1   # b; the collection offers no access at all


def test_a_metadata_that_is_not_inherited_serves_only_its_own_dataset():
    body = doc(HTTP + '<dataset name="c" urlPath="c.nc"><metadata><serviceName>http</serviceName></metadata>'
               '<dataset name="a" urlPath="a.nc"/></dataset>')
    assert [f.path for f in parse_catalog(body, URL).files] == ["c.nc"]


@pytest.mark.parametrize(("size", "units", "hint"), [("12.5", "Kbytes", 12_500), ("3", "Mbytes", 3_000_000),
                                                     ("77", "bytes", 77), ("x", "Mbytes", None),
                                                     ("1", "furlongs", None), ("nan", "bytes", None)])
def test_data_size_is_a_hint_in_bytes(size, units, hint):
    body = doc(HTTP + f'<dataset name="a" urlPath="a.nc" serviceName="http"><dataSize units="{units}">{size}'
               '</dataSize></dataset>')
    assert parse_catalog(body, URL).files[0].size_hint == hint


def test_catalog_refs_resolve_relative_and_absolute():
    body = doc('<catalogRef xlink:href="sub/catalog.xml"/><catalogRef xlink:href="/thredds/catalog/y.xml"/>'
               '<catalogRef xlink:href="https://o/c.xml"/><catalogRef xlink:href="ftp://o/c.xml"/>')
    catalog = parse_catalog(body, URL)
    assert catalog.refs == ["http://h/thredds/catalog/x/sub/catalog.xml", "http://h/thredds/catalog/y.xml",
                            "https://o/c.xml"]
    assert "ftp://o/c.xml" in catalog.warnings[0]


def test_other_xml_is_not_a_catalogue_and_broken_xml_is_a_discovery_error():
    with pytest.raises(NotACatalog):
        parse_catalog(b"<feed/>", URL)
    with pytest.raises(DiscoveryError):
        parse_catalog(b"<catalog><dataset>", URL)
    with pytest.raises(DiscoveryError, match="DOCTYPE"):
        parse_catalog(b'<!DOCTYPE c [<!ENTITY a "b">]><catalog/>', URL)


class Web:
    def __init__(self, pages: dict[str, bytes]) -> None:
        self.pages = pages
        self.asked: list[str] = []

    async def fetch(self, url: str, *, method: str = "GET", headers=None, max_bytes: int = 0) -> FetchResult:
        self.asked.append(url)
        await asyncio.sleep(0)
        if url not in self.pages:
            return FetchResult(status=404, headers={}, body=b"", url=url)
        return FetchResult(status=200, headers={"content-type": "application/xml"}, body=self.pages[url], url=url)


def chain(n: int, loop: bool = False) -> dict[str, bytes]:
    """Catalogues c0 → c1 → ... → c(n-1) (the last back to c0 when ``loop``), one file each."""
    pages = {}
    for i in range(n):
        ref = f"c{i + 1}.xml" if i + 1 < n else ("c0.xml" if loop else "")
        refs = f'<catalogRef xlink:href="{ref}"/>' if ref else ""
        pages[f"http://h/thredds/catalog/c{i}.xml"] = doc(HTTP + f'<dataset name="f" urlPath="top/l{i}/f{i}.nc" '
                                                  f'serviceName="http"/>{refs}')
    return pages


def run(web: Web, source: str = "http://h/thredds/catalog/c0.xml", **kwargs):
    return asyncio.run(discover([source], fetch=web.fetch, delay=lambda *_: 0.0, **kwargs))


def test_a_catalog_ref_loop_is_read_once_and_paths_lose_their_common_root():
    web = Web(chain(3, loop=True))
    dataset = run(web)
    assert sorted(f.relpath for f in dataset.files) == ["l0/f0.nc", "l1/f1.nc", "l2/f2.nc"]
    assert sorted(web.asked) == sorted(set(web.asked)) and len(web.asked) == 3
    assert all(f.size is None for f in dataset.files)  # (sizes are learned from the responses)


def test_depth_and_catalogue_count_are_bounded():
    dataset = run(Web(chain(5)), max_depth=2)
    assert len(dataset.files) == 3
    assert any("deeper than max_depth=2" in w for w in dataset.warnings)
    with pytest.raises(DiscoveryError, match="more than max_files=2 THREDDS catalogues"):
        run(Web(chain(5)), max_files=2)


def test_a_sub_catalogue_that_fails_is_unlisted_and_the_rest_is_kept():
    pages = chain(2)
    pages["http://h/thredds/catalog/c0.xml"] = pages["http://h/thredds/catalog/c0.xml"].replace(
        b"</catalog>", b'<catalogRef xlink:href="gone.xml"/></catalog>')
    dataset = run(Web(pages))
    assert len(dataset.files) == 2
    assert dataset.unlisted and "gone.xml" in dataset.unlisted[0][1]


def test_a_catalogue_on_another_origin_is_followed_only_when_a_source_names_it():
    pages = {"http://h/thredds/catalog/catalog.xml": doc('<catalogRef xlink:href="http://o/thredds/catalog.xml"/>' + HTTP
                                                 + '<dataset urlPath="a/x.nc" serviceName="http"/>'),
             "http://o/thredds/catalog.xml": doc(HTTP + '<dataset urlPath="b/y.nc" serviceName="http"/>')}
    web = Web(pages)
    dataset = run(web, "http://h/thredds/catalog/catalog.xml")
    assert [f.relpath for f in dataset.files] == ["x.nc"]
    assert "http://o/thredds/catalog.xml" not in web.asked
    assert any("another origin" in w for w in dataset.warnings)
