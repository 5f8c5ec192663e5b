"""Which URLs a transfer takes: a scheme dtune does not fetch is a usage error naming the URL."""

from __future__ import annotations

import pytest

from dtune.errors import UsageError
from dtune.transfer.request import check_schemes


@pytest.mark.parametrize("url", ["http://h/x", "https://h/x", "s3://b/k", "HTTP://h/x", "urls.txt", "-",
                                 "doi:10.5281/zenodo.1", "https://doi.org/10.5281/zenodo.1"])
def test_fetched_schemes_and_local_names_pass(url: str) -> None:
    check_schemes([url], [])


@pytest.mark.parametrize(("sources", "mirrors", "said"), [
    (["ftp://h/pub/x"], [], "ftp://h/pub/x: ftp:// is not supported"),
    (["gopher://h/x"], [], "gopher://h/x: gopher:// is not supported"),
    (["file:///etc/hostname"], [], "file:///etc/hostname: file:// is not supported"),
    (["http://h/x"], ["ftp://m/x"], "--mirror ftp://m/x: ftp://"),
    (["ftp://user:secret@h/x"], [], "ftp://***@h/x: ftp://"),
    (["http://h/x"], ["doi:10.1/x"], "--mirror doi:10.1/x: a DOI names a record of files"),
])
def test_other_schemes_are_usage_errors_naming_the_url(sources, mirrors, said) -> None:
    with pytest.raises(UsageError) as info:
        check_schemes(sources, mirrors)
    assert said in str(info.value) and "secret" not in str(info.value)



@pytest.mark.parametrize("url", ["dav://h/x/", "davs://h/x", "DAVS://h/x/"])
def test_dav_schemes_pass(url: str) -> None:
    check_schemes([url], [url])


def test_dav_sources_become_http_listed_with_propfind_and_keep_their_credentials() -> None:
    from dtune.config import resolve  # (only this test builds a whole request)
    from dtune.http.message import split_url
    from dtune.options import OPTIONS
    from dtune.transfer import request_from

    values = resolve(OPTIONS, given={}, given_origin="Python", environ={}, use_config=False)
    request = request_from(["davs://u:pw%20x@h.test/d/", "http://o.test/e/", "dav://h.test/f.bin"], "out", values,
                           environ={})
    assert request.sources == ["https://h.test/d/", "http://o.test/e/", "http://h.test/f.bin"]
    assert request.dav == ["https://h.test/d/", "http://h.test/f.bin"]
    head = request.access.request("PROPFIND", split_url("https://h.test/d/")[0], "/d/").decode()
    assert "Authorization: Basic " in head
    assert "pw" not in repr(request.record())
