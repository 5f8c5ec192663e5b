"""fsspec's own test suite for filesystems, run against ``DtuneFileSystem`` and a real nginx.

fsspec ships these tests in its wheel (``fsspec.tests.abstract``) for implementations to test
themselves with: the suite of the installed fsspec runs, unchanged, on any machine that has the
``test`` extra. Its ``get`` tests (``AbstractGetTests``: files, directories, globs, lists,
``maxdepth``, trailing slashes, into new and existing local directories) apply to dtune, whose
``get`` is its own. The remote trees the tests read are written by fsspec's own scenario
builders (``_bulk_operations_scenario_0``, ...) into a directory that nginx (its JSON index)
or ``dtune serve`` (its manifest) serves, each test in a fresh sub-directory; ``fs`` is ``fsspec.filesystem("dtune")``.

What cannot apply to a read-only HTTP filesystem is skipped by name, with the reason
(``NOT_APPLICABLE``). fsspec's HTTP tests proper (``fsspec/implementations/tests/test_http.py``)
are not on PyPI: neither the wheel nor the sdist holds them (fsspec's ``pyproject.toml`` builds
both with ``exclude = ["**/tests/*", "!**/tests/abstract/"]``).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness import child_env
from support.realservers import DtuneServe, Nginx, Unavailable, public_dir

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")
abstract = pytest.importorskip("fsspec.tests.abstract")

# test (pytest's name for it) → why it cannot apply to dtune: skipped by this name, with the reason
QUERY = "'?' starts a URL's query, it is no glob character in an http(s) URL (nor in fsspec's HTTPFileSystem)"
NOT_APPLICABLE = {
    "test_get_directory_recursive": "makes its remote tree with fs.mkdir and fs.touch: dtune reads HTTP, "
                                    "it does not write to the server",
    "test_get_glob_edge_cases[fil?1-False-None-expected0]": QUERY,
    "test_get_glob_edge_cases[fil?1-True-None-expected1]": QUERY,
}
# fsspec's other suites write to the filesystem under test: none applies to a read-only HTTP one
WRITING_SUITES = {
    abstract.AbstractCopyTests: "copies within the remote filesystem: dtune cannot write to an HTTP server",
    abstract.AbstractPutTests: "uploads to the remote filesystem: dtune cannot write to an HTTP server",
    abstract.AbstractOpenTests: "opens remote files for writing: dtune cannot write to an HTTP server",
    abstract.AbstractPipeTests: "writes remote files with pipe_file: dtune cannot write to an HTTP server",
}


SERVERS = ["nginx-json", "dtune-manifest"]


def suite_name(name: str) -> str:
    """pytest's name for a test as fsspec's suite has it: without the server's parameter."""
    for server in SERVERS:
        name = name.replace(f"[{server}]", "").replace(f"[{server}-", "[")
    return name


@pytest.fixture(scope="module", params=SERVERS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A directory served by nginx (its JSON index) or by ``dtune serve`` (its manifest)."""
    root = public_dir("dtune-test-abstract-")
    server = (Nginx(root) if request.param == "nginx-json"
              else DtuneServe(root, env=child_env(tmp_path_factory.mktemp("serve"))))
    try:
        server.start()
    except Unavailable as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"{request.param} not available: {exc}")
    try:
        yield root, server.base.rstrip("/")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def url_join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts[:-1]) + "/" + parts[-1]


class ServedFixtures(abstract.AbstractFixtures):
    """The remote scenarios written to local disk under nginx's root, named by their URL."""

    @pytest.fixture(autouse=True)
    def _dtune_filesystem(self, request: pytest.FixtureRequest) -> Iterator[None]:
        name = suite_name(request.node.name)
        if name in NOT_APPLICABLE:
            pytest.skip(NOT_APPLICABLE[name])
        fsspec.register_implementation("dtune", "dtune.fsspec.DtuneFileSystem", clobber=True)
        fsspec.filesystem("dtune").clear_instance_cache()
        yield
        fsspec.filesystem("dtune").clear_instance_cache()

    @pytest.fixture
    def fs(self):
        return fsspec.filesystem("dtune", skip_instance_cache=True)

    @pytest.fixture
    def fs_join(self):
        return url_join

    @pytest.fixture
    def remote_dir(self, served: tuple[Path, str]) -> Iterator[tuple[Path, str]]:
        root, base = served
        name = f"t-{uuid.uuid4().hex[:12]}"
        (root / name).mkdir(mode=0o755)
        try:
            yield root / name, f"{base}/{name}"
        finally:
            shutil.rmtree(root / name, ignore_errors=True)

    @pytest.fixture
    def fs_path(self, remote_dir: tuple[Path, str]) -> str:
        return remote_dir[1]

    def _served(self, build, local_fs, local_join, remote_dir: tuple[Path, str]) -> str:
        path, url = remote_dir
        source = build(local_fs, local_join, str(path))
        for p in [Path(source), *Path(source).rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)   # nginx's workers may run as nobody
        return url + "/" + Path(source).relative_to(path).as_posix()

    @pytest.fixture
    def fs_bulk_operations_scenario_0(self, local_fs, local_join, remote_dir):
        return self._served(self._bulk_operations_scenario_0, local_fs, local_join, remote_dir)

    @pytest.fixture
    def fs_glob_edge_cases_files(self, local_fs, local_join, remote_dir):
        return self._served(self._glob_edge_cases_files, local_fs, local_join, remote_dir)

    @pytest.fixture
    def fs_dir_and_file_with_same_name_prefix(self, local_fs, local_join, remote_dir):
        return self._served(self._dir_and_file_with_same_name_prefix, local_fs, local_join, remote_dir)

    @pytest.fixture
    def fs_10_files_with_hashed_names(self, local_fs, local_join, remote_dir):
        return self._served(self._10_files_with_hashed_names, local_fs, local_join, remote_dir)

    @pytest.fixture
    def fs_target(self, fs_path: str) -> str:
        return url_join(fs_path, "target")


def not_applicable(suite: type, reason: str) -> dict:
    """Every test of ``suite``, marked skip with ``reason``."""
    return {name: pytest.mark.skip(reason=reason)(getattr(suite, name))
            for name in dir(suite) if name.startswith("test_")}


class TestDtuneGet(ServedFixtures, abstract.AbstractGetTests):
    pass


class TestDtuneWritingSuites(ServedFixtures, *WRITING_SUITES):
    for _suite, _reason in WRITING_SUITES.items():
        locals().update(not_applicable(_suite, _reason))
    del _suite, _reason


def test_every_skip_names_a_test_of_the_suite() -> None:
    """A name in NOT_APPLICABLE that fsspec no longer has would skip nothing and say so here."""
    assert {n.partition("[")[0] for n in NOT_APPLICABLE} <= {n for n in dir(abstract.AbstractGetTests)
                                                           if n.startswith("test_")}
