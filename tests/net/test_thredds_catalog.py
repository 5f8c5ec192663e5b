"""A THREDDS catalogue tree (TDS 4/5 ``catalog.xml``, InvCatalog 1.0) served by a real
``python -m http.server`` on 127.0.0.1, the files under its ``/thredds/fileServer/`` path:
nested and looping catalogRefs, a compound service, relative and absolute urlPaths and bases,
an inherited serviceName, an OPeNDAP-only dataset and one escaping the tree. What dtune writes
is compared byte for byte."""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.realservers import PythonHttpServer

import dtune

NS = ('xmlns="http://www.unidata.ucar.edu/namespaces/thredds/InvCatalog/v1.0" '
      'xmlns:xlink="http://www.w3.org/1999/xlink"')
RNG = random.Random(5)
FILES = {"model/run1/a.nc": RNG.randbytes(12_500), "model/run1/b.nc": RNG.randbytes(300_000),
         "model/run1/c.nc": b"opendap only", "model/run2/d.nc": RNG.randbytes(2000),
         "model/run2/e.nc": b"e" * 10, "model/run3/f.nc": RNG.randbytes(70_000)}
EXPECTED = {"run1/a.nc", "run1/b.nc", "run2/d.nc", "run2/e.nc", "run3/f.nc"}


def root_catalog(port: int) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<catalog {NS} name="root" version="1.0.1">
  <service name="all" serviceType="Compound" base="">
    <service name="odap" serviceType="OPeNDAP" base="/thredds/dodsC/"/>
    <service name="http" serviceType="HTTPServer" base="/thredds/fileServer/"/>
  </service>
  <service name="dapOnly" serviceType="OPeNDAP" base="/thredds/dodsC/"/>
  <dataset name="model" ID="model">
    <metadata inherited="true"><serviceName>all</serviceName></metadata>
    <dataset name="a.nc" urlPath="model/run1/a.nc"><dataSize units="Kbytes">12.5</dataSize></dataset>
    <dataset name="b.nc" urlPath="/model/run1/b.nc" serviceName="all"/>
    <dataset name="c.nc" urlPath="model/run1/c.nc" serviceName="dapOnly"/>
    <dataset name="evil" urlPath="../../etc/passwd" serviceName="all"/>
  </dataset>
  <catalogRef xlink:href="sub/catalog.xml" xlink:title="sub" name=""/>
  <catalogRef xlink:href="http://127.0.0.1:{port}/thredds/catalog/other/catalog.xml" xlink:title="other" name=""/>
  <catalogRef xlink:href="http://127.0.0.2:9/thredds/catalog.xml" xlink:title="elsewhere" name=""/>
</catalog>
"""


def sub_catalog(port: int) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<catalog {NS} version="1.0.1">
  <service name="files" serviceType="HTTPServer" base="http://127.0.0.1:{port}/thredds/fileServer/"/>
  <dataset name="run2">
    <dataset name="d.nc" ID="d"><access serviceName="files" urlPath="model/run2/d.nc"/></dataset>
    <dataset name="e.nc" urlPath="model/run2/e.nc"><serviceName>files</serviceName></dataset>
  </dataset>
  <catalogRef xlink:href="../catalog.xml" xlink:title="back to the top" name=""/>
</catalog>
"""


OTHER = f"""<?xml version="1.0" encoding="UTF-8"?>
<catalog {NS} version="1.0.1">
  <service name="http" serviceType="HTTPServer" base="/thredds/fileServer/"/>
  <dataset name="f.nc" urlPath="model/run3/f.nc" serviceName="http"/>
  <catalogRef xlink:href="/thredds/catalog/sub/catalog.xml" xlink:title="seen already" name=""/>
</catalog>
"""


@pytest.fixture(scope="module")
def server() -> Iterator[PythonHttpServer]:
    root = Path(tempfile.mkdtemp(prefix="dtune-thredds-"))
    try:
        for rel, data in FILES.items():
            path = root / "thredds/fileServer" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (root / "thredds/catalog/sub").mkdir(parents=True)
        (root / "thredds/catalog/other").mkdir(parents=True)
        with PythonHttpServer(root, log=True) as srv:
            (root / "thredds/catalog/catalog.xml").write_text(root_catalog(srv.port))
            (root / "thredds/catalog/sub/catalog.xml").write_text(sub_catalog(srv.port))
            (root / "thredds/catalog/other/catalog.xml").write_text(OTHER)
            (root / "thredds/catalog/plain").mkdir()
            (root / "thredds/catalog/plain/catalog.xml").write_text("<notes><n>not a catalogue</n></notes>")
            yield srv
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def out() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dtune-thredds-out-"))
    yield path / "out"
    shutil.rmtree(path, ignore_errors=True)


def written(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_catalogue_tree_fetches_every_http_dataset_byte_exact(server, out):
    before = len(server.log())
    events: list[dict] = []
    result = dtune.get(server.url("thredds/catalog/catalog.xml"), out, no_history=True, progress=events.append)
    assert result.ok, result.failed
    assert written(out) == {rel: FILES["model/" + rel] for rel in EXPECTED}
    warnings = " ".join(e.get("reason", "") for e in events if e.get("event") == "warning")
    assert "1 dataset(s) offered only through other services" in warnings
    assert "'../../etc/passwd'" in warnings
    assert "127.0.0.2" in warnings and "another origin" in warnings
    asked = [line.uri for line in server.log()[before:] if line.uri.startswith("/thredds/catalog/")]
    assert sorted(asked) == ["/thredds/catalog/catalog.xml", "/thredds/catalog/other/catalog.xml",
                             "/thredds/catalog/sub/catalog.xml"]   # the loop and the repeat: read once
    assert not any("c.nc" in line.uri or "passwd" in line.uri for line in server.log()[before:])


def test_catalog_html_is_read_as_its_xml_and_filters_apply_to_paths(server, out):
    result = dtune.get(server.url("thredds/catalog/catalog.html"), out, no_history=True,
                       include=["run2/*"], exclude=["*e.nc"])
    assert result.ok, result.failed
    assert written(out) == {"run2/d.nc": FILES["model/run2/d.nc"]}


def test_a_catalog_xml_that_is_no_thredds_catalogue_is_fetched_as_one_file(server, out):
    result = dtune.get(server.url("thredds/catalog/plain/catalog.xml"), out, no_history=True)
    assert result.ok, result.failed
    assert written(out) == {"catalog.xml": b"<notes><n>not a catalogue</n></notes>"}
