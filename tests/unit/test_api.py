"""dtune.api on plain data: keywords, Result, what verified a file; ``import dtune`` stays light."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import dtune
from dtune.api import FileReport, Result, _Events, aget_files, resolve_options
from dtune.errors import DtuneError, UsageError


def test_an_unknown_keyword_is_a_typeerror_naming_it_and_the_closest_option() -> None:
    with pytest.raises(TypeError, match=r"'retrys'; did you mean 'retries'\?"):
        resolve_options({"retrys": 3})
    with pytest.raises(TypeError, match=r"'max_conections_per_host'; did you mean 'max_connections_per_host'"):
        resolve_options({"max_conections_per_host": 3})
    with pytest.raises(TypeError) as info:
        resolve_options({"zzzz": 1})
    assert "'zzzz'" in str(info.value) and "did you mean" not in str(info.value)


def test_the_command_lines_output_options_are_refused_with_the_reason() -> None:
    with pytest.raises(TypeError, match="progress="):
        resolve_options({"json": True})
    with pytest.raises(TypeError, match="no progress bar"):
        resolve_options({"no_progress": True})


def test_values_may_be_python_values_or_flag_text_and_a_bad_one_names_its_keyword(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("DTUNE_CONFIG", raising=False)
    values = resolve_options({"tcp_buffer": "4M", "retries": 3, "mirror": ["http://b/x"], "no_history": True})
    assert values["tcp_buffer"].value == 4 * 1024 * 1024 and values["retries"].value == 3
    assert values["mirror"].value == ["http://b/x"] and values["no_history"].value is True
    assert values["retries"].origin == "argument"
    with pytest.raises(UsageError, match="retries"):
        resolve_options({"retries": "many"})


def report(relpath: str, status: str, error: str | None = None) -> FileReport:
    return FileReport(relpath, status, 1, None if status == "failed" else Path("/out", relpath), error=error)


def test_result_ok_exit_status_and_raise_for_status_listing_the_failed_files() -> None:
    good = Result([report("a", "done"), report("b", "skipped")])
    assert good.ok and good.exit_status == 0 and good.raise_for_status() is good and good.failed == []
    bad = Result([report("a", "done"), report("b", "failed", "b: server answered 404")])
    assert not bad.ok and bad.exit_status == 1 and [f.relpath for f in bad.failed] == ["b"]
    with pytest.raises(DtuneError, match=r"^1 of 2 files failed: b: server answered 404$"):
        bad.raise_for_status()
    many = Result([report(f"f{i}", "failed") for i in range(8)])
    with pytest.raises(DtuneError, match=r"^8 of 8 files failed: f0; f1; f2; f3; f4; and 3 more$"):
        many.raise_for_status()


def test_what_verified_a_file_comes_from_its_file_done_event() -> None:
    seen: list[dict] = []
    events = _Events(seen.append, lambda snap: {"event": "progress"})
    for event in ({"event": "file_done", "file": "a", "size": 1, "checksum": "sha256 (dtune manifest)"},
                  {"event": "file_done", "file": "b", "size": 1, "checksum": None},
                  {"event": "file_done", "file": "c", "size": 1, "checksum": "md5 (SHA256SUMS)"},
                  {"event": "file_done", "file": "d", "size": 1, "skipped": True}):
        events.event(event)
    assert events.checksums == {"a": "sha256 (dtune manifest)", "c": "md5 (SHA256SUMS)"}
    assert [e["file"] for e in seen] == ["a", "b", "c", "d"]


def test_a_callback_that_raises_is_not_called_again_and_its_error_is_kept() -> None:
    calls = []

    def broken(event: dict) -> None:
        calls.append(event)
        raise KeyError("x")

    events = _Events(broken, lambda snap: {"event": "progress"})
    events.event({"event": "start"})
    events.event({"event": "file_done", "file": "a", "checksum": "md5 (Metalink)"})
    assert len(calls) == 1 and events.checksums == {"a": "md5 (Metalink)"}   # still recorded
    with pytest.raises(KeyError):
        events.raise_error()


def test_aget_files_refuses_what_is_not_one_file_url(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not the URL of one file"):
        asyncio.run(aget_files([("http://127.0.0.1:9/dir/", tmp_path / "x")]))
    with pytest.raises(ValueError, match="not the URL of one file"):   # a local path is no URL here
        asyncio.run(aget_files([("urls.txt", tmp_path / "x")]))
    with pytest.raises(ValueError, match="no URL"):
        asyncio.run(aget_files([]))
    assert list(tmp_path.iterdir()) == []


def test_import_dtune_loads_no_api_until_it_is_used() -> None:
    code = ("import sys, dtune; print('dtune.api' in sys.modules, 'dtune.transfer' in sys.modules); "
            "print(dtune.errors.UsageError.__name__, 'dtune.api' in sys.modules); "
            "dtune.get; print('dtune.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "UsageError", "False", "True"]
    assert dtune.Result is Result
    with pytest.raises(AttributeError, match="nope"):
        dtune.nope  # noqa: B018


def test_fsspec_paths_are_http_urls_with_any_dtune_prefix_dropped() -> None:
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from dtune.fsspec import DtuneFileSystem

    strip = DtuneFileSystem._strip_protocol
    assert strip("http://h/x") == "http://h/x"
    assert strip("dtune::https://h/x") == "https://h/x"
    assert strip("dtune://http://h:8080/d/") == "http://h:8080/d/"
    assert strip("dtune://h/path/f.nc") == "https://h/path/f.nc"


def test_the_pooch_downloader_checks_its_options_and_progressbar_when_made() -> None:
    import importlib.util

    from dtune.pooch import Downloader  # needs nothing of pooch itself

    with pytest.raises(TypeError, match="did you mean 'retries'"):
        Downloader(retrie=3)
    with pytest.raises(UsageError, match="retries"):
        Downloader(retries="x")
    assert Downloader(retries=3, progressbar=False).options == {"retries": 3}
    if importlib.util.find_spec("tqdm") is None:
        with pytest.raises(ValueError, match="tqdm"):
            Downloader(progressbar=True)
    else:
        assert Downloader(progressbar=True).progressbar is True
