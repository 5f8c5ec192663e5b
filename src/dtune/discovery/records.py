"""DOI records: which repository a DOI or page names, and the files its public API lists.

Pure: strings and decoded JSON in, untrusted ``RecordFile`` objects out (``discovery/catalogs.py``
asks the resolver and the APIs). The shapes read are the repositories' documented answers:

- Zenodo ``GET {origin}/api/records/N``: ``files[]`` with ``key``, ``size``, ``checksum``
  (``"md5:HEX"``) and ``links.self`` (``.../files/KEY/content``, or ``links.content``);
  ``metadata.access_right`` / ``access.files`` say whether the files are ``restricted``.
- figshare ``GET {api}/v2/articles/N[/versions/K]``: ``files[]`` with ``name``, ``size``,
  ``computed_md5`` (or ``supplied_md5``), ``download_url``, ``is_link_only``.
- Dataverse ``GET {origin}/api/datasets/:persistentId/?persistentId=doi:...``:
  ``data.latestVersion.files[]`` with ``restricted``, ``directoryLabel`` and ``dataFile``
  (``id``, ``filename``, ``filesize``, ``md5`` or ``checksum {type, value}``, and for an
  ingested tabular file ``originalFileName``/``originalFileSize``/``originalFileFormat``: the
  original is asked for, ``{origin}/api/access/datafile/ID?format=original``).

Landing pages are told apart by their path, wherever they are served: ``/records/N`` or
``/record/N`` (Zenodo), ``/articles/[TYPE/SLUG/]N[/VERSION]`` (figshare), ``/dataset.xhtml`` or
``/citation`` with ``persistentId`` (Dataverse).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlsplit

from dtune import checksums
from dtune.checksums import Checksum
from dtune.discovery.urls import requote_url
from dtune.errors import DiscoveryError, SourceError

DEFAULT_RESOLVER = "https://doi.org/"
DEFAULT_FIGSHARE_API = "https://api.figshare.com"

_DOI = re.compile(r"^10\.\d{4,9}/\S+$")
_FIGSHARE_DOI = re.compile(r"^10\.6084/m9\.figshare\.(\d{1,12})(?:\.v(\d{1,6}))?$", re.IGNORECASE)
_ZENODO_PAGE = re.compile(r"^/records?/(\d{1,12})/?$")
_DIGITS = re.compile(r"^\d{1,12}$")
_DOI_HOSTS = ("doi.org", "dx.doi.org", "www.doi.org")


@dataclass(frozen=True, slots=True)
class Landing:
    """A repository record: ``kind`` (zenodo | figshare | dataverse), the API URL to ask, and the
    origin its relative links and download URLs are built on."""

    kind: str
    api: str
    origin: str
    label: str   # how messages name the record


@dataclass(frozen=True, slots=True)
class RecordFile:
    """One file of a record. ``name``: UNTRUSTED relative path; ``url``: request-ready."""

    name: str
    url: str
    size: int | None
    checksum: Checksum | None
    restricted: bool = False


def doi_of(source: str) -> str | None:
    """The DOI a source names (``doi:10.X/Y`` or ``https://doi.org/10.X/Y``), else None."""
    text = source.strip()
    if text[:4].lower() == "doi:":
        doi = text[4:].strip()
    else:
        parts = urlsplit(text)
        if parts.scheme.lower() not in ("http", "https") or (parts.hostname or "") not in _DOI_HOSTS:
            return None
        doi = parts.path.lstrip("/")
    doi = unquote(doi)  # (a DOI in a URL path may be percent-encoded)
    return doi if _DOI.match(doi) else None


def check_doi(source: str) -> str:
    """The DOI of a ``doi:`` source; ``SourceError`` (a usage error) naming it when it is not one."""
    doi = doi_of(source)
    if doi is None:
        raise SourceError(f"{source}: not a DOI (expected doi:10.NNNN/SUFFIX)")
    return doi


def resolver_url(resolver: str, doi: str) -> str:
    return requote_url(resolver.rstrip("/") + "/" + quote(doi, safe="/:;()._-"))


def figshare_from_doi(doi: str, api: str) -> Landing | None:
    """figshare's own DOIs (10.6084/m9.figshare.N[.vK]) name the article without a resolver."""
    found = _FIGSHARE_DOI.match(doi)
    if found is None:
        return None
    return _figshare(found.group(1), found.group(2), api, f"doi:{doi}")


def _figshare(article: str, version: str | None, api: str, label: str) -> Landing:
    path = f"/v2/articles/{int(article)}" + (f"/versions/{int(version)}" if version else "")
    base = api.rstrip("/")
    return Landing("figshare", requote_url(base + path), base, label)


def landing(url: str, figshare_api: str, *, figshare_anywhere: bool = True) -> Landing | None:
    """The record a landing page URL names, or None when its shape is none known.
    ``figshare_anywhere`` False: an ``/articles/`` path counts only on a host named figshare (a
    page URL the user typed: such paths are common elsewhere)."""
    try:
        parts = urlsplit(requote_url(url))
    except ValueError:
        return None
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path
    query = parse_qs(parts.query)
    zenodo = _ZENODO_PAGE.match(path)
    if zenodo:
        record = int(zenodo.group(1))
        return Landing("zenodo", f"{origin}/api/records/{record}", origin, f"Zenodo record {record}")
    if path.rstrip("/").endswith(("/dataset.xhtml", "/citation")) and query.get("persistentId"):
        pid = query["persistentId"][0]
        if pid.strip():
            api = f"{origin}/api/datasets/:persistentId/?persistentId={quote(pid.strip(), safe=':/')}"
            return Landing("dataverse", api, origin, f"Dataverse dataset {pid.strip()}")
    segments = [s for s in path.split("/") if s]
    if segments[:1] == ["articles"] and (figshare_anywhere or "figshare" in (parts.hostname or "")):
        rest = segments[1:]
        article = version = None
        if len(rest) == 1:
            article = rest[0]
        elif len(rest) == 2:
            article = rest[1]
        elif len(rest) == 3:
            article = rest[2]
        elif len(rest) == 4:
            article, version = rest[2], rest[3]
        if article and _DIGITS.match(article) and (version is None or _DIGITS.match(version)):
            return _figshare(article, version, figshare_api, f"figshare article {int(article)}")
    return None


# -- the APIs' answers ---------------------------------------------------------------------

def _bad(label: str, why: str) -> DiscoveryError:
    return DiscoveryError(f"{label}: unexpected API answer: {why}")


def _size(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62:
        return value
    return None


def _md5(value: object, where: str) -> Checksum | None:
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text[:4].lower() == "md5:":
        text = text[4:]
    return checksums.make("md5", text, where) if text else None


def _url(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return requote_url(value)
    except ValueError:
        return None


def _files(doc: object, label: str, *path: str) -> list:
    node = doc
    for key in path:
        if not isinstance(node, dict):
            raise _bad(label, f"no object holding {key!r}")
        node = node.get(key)
    if node is None:
        return []
    if not isinstance(node, list):
        raise _bad(label, f"{'.'.join(path)} is not a list")
    return node


def zenodo_files(doc: object, landing: Landing) -> list[RecordFile]:
    label = landing.label
    if not isinstance(doc, dict):
        raise _bad(label, "not a JSON object")
    metadata = doc.get("metadata")
    access = doc.get("access")
    restricted = (isinstance(metadata, dict) and metadata.get("access_right") in ("restricted", "closed", "embargoed")) \
        or (isinstance(access, dict) and access.get("files") in ("restricted", "closed"))
    out = []
    for item in _files(doc, label, "files"):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise _bad(label, "a file without a 'key'")
        key = item["key"]
        links = item.get("links") if isinstance(item.get("links"), dict) else {}
        url = _url(links.get("content")) or _url(links.get("self"))
        if url is None or (links.get("content") is None and not url.rstrip("/").endswith("/content")
                           and "/api/files/" not in url):
            url = requote_url(f"{landing.api}/files/{quote(key, safe='')}/content")
        out.append(RecordFile(key, url, _size(item.get("size")), _md5(item.get("checksum"), label),
                              restricted=bool(restricted)))
    return out


def figshare_files(doc: object, landing: Landing) -> tuple[list[RecordFile], list[str]]:
    """The files, and the names of link-only ones (hosted elsewhere: not fetched)."""
    label = landing.label
    if not isinstance(doc, dict):
        raise _bad(label, "not a JSON object")
    out, links = [], []
    for item in _files(doc, label, "files"):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _bad(label, "a file without a 'name'")
        if item.get("is_link_only") is True:
            links.append(item["name"])
            continue
        url = _url(item.get("download_url"))
        if url is None:
            raise _bad(label, f"file {item['name'][:200]!r} has no http(s) download_url")
        checksum = _md5(item.get("computed_md5"), label) or _md5(item.get("supplied_md5"), label)
        out.append(RecordFile(item["name"], url, _size(item.get("size")), checksum))
    return out, links


def dataverse_files(doc: object, landing: Landing) -> list[RecordFile]:
    label = landing.label
    out = []
    for item in _files(doc, label, "data", "latestVersion", "files"):
        data = item.get("dataFile") if isinstance(item, dict) else None
        if not isinstance(data, dict):
            raise _bad(label, "a file without a 'dataFile'")
        ident = data.get("id")
        if not isinstance(ident, int) or isinstance(ident, bool) or ident < 0:
            raise _bad(label, "a dataFile without a numeric 'id'")
        original = isinstance(data.get("originalFileFormat"), str) and _size(data.get("originalFileSize")) is not None
        name = data.get("originalFileName") if original else None
        if not isinstance(name, str):
            name = data.get("filename", item.get("label"))
        if not isinstance(name, str):
            raise _bad(label, f"dataFile {ident} has no filename")
        folder = item.get("directoryLabel")
        if isinstance(folder, str) and folder.strip("/"):
            name = folder.strip("/") + "/" + name
        size = _size(data.get("originalFileSize")) if original else _size(data.get("filesize"))
        checksum = _md5(data.get("md5"), label)
        block = data.get("checksum")
        if checksum is None and isinstance(block, dict) and isinstance(block.get("type"), str):
            algo = checksums.canonical(block["type"])
            value = block.get("value")
            if algo is not None and isinstance(value, str):
                checksum = checksums.make(algo, value, label)
        url = f"{landing.origin}/api/access/datafile/{ident}" + ("?format=original" if original else "")
        out.append(RecordFile(name, url, size, checksum, restricted=item.get("restricted") is True))
    return out
