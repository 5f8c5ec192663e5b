"""Every installed peer, run by its adapter against dtune serve on loopback, lands where we look.

The adapters' output-layout mapping is only as good as the tools' real
behaviour with awkward names (spaces, '#', '?', '%', quotes, unicode), so
each tool fetches such a tree and the bench verifier must find every file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from dtune_lab.bench.config import ToolSpec
from dtune_lab.bench.peers import Job, peer
from dtune_lab.bench.urls import expected_paths, extra_files, join_url
from dtune_lab.bench.verify import source_digests, verify_output
from dtune_lab.serveproc import ServerProcess

pytestmark = pytest.mark.peers

NAMES = {
    "sub dir/a b%c#d?.txt": b"one" * 1000,
    "ü né 東京.txt": b"two" * 10,
    "it's [1] & +.txt": b"three",
    "deep/er/plain.bin": bytes(range(256)) * 40,
}

VARIANTS = [
    ToolSpec("dtune"),
    ToolSpec("dtune", "list", mode="list"),
    ToolSpec("aria2c", "x4", ("-x4", "-s4", "-j4")),
    ToolSpec("curl"),
    ToolSpec("curl", "Z", ("-Z", "--parallel-max", "4")),
    ToolSpec("wget"),
    ToolSpec("lftp", "mirror", ("--parallel=4",)),
    ToolSpec("rclone", "t4", ("--transfers", "4")),
]
ONE_FILE = [ToolSpec("dtune"), ToolSpec("lftp", "pget", ("-n", "4"), mode="pget"),
            ToolSpec("aria2c", "x4", ("-x4", "-s4")), ToolSpec("rclone")]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("srv")
    for dataset, names in (("ds one", NAMES), ("single", {"video/clip 1.bin": b"v" * 300_000})):
        for rel, data in names.items():
            path = root / dataset / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    with ServerProcess(str(root), port=0) as srv:
        yield root, srv.url


def fetch(spec: ToolSpec, served, dataset: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, url = served
    adapter = peer(spec.tool)
    if adapter.missing():
        pytest.skip(adapter.missing())
    files = tuple(sorted((str(p.relative_to(root / dataset)), p.stat().st_size)
                         for p in (root / dataset).rglob("*") if p.is_file()))
    base = join_url(url, dataset) + "/"
    out, lists = tmp_path / "out", tmp_path / "lists"
    out.mkdir()
    lists.mkdir()
    job = Job(dataset=dataset, files=files, bases=(base,), listing_bases=(base,), outdir=str(out),
              workdir=str(lists))
    cmd = adapter.command(spec, job)
    for name, text in cmd.files.items():
        (lists / name).write_text(text)
    proc = subprocess.run(cmd.argv, cwd=cmd.cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-1500:]
    expected = expected_paths(cmd.layout, out, [rel for rel, _ in files])
    verdict = verify_output(expected, source_digests(root / dataset, files))
    assert verdict.ok, verdict.reason() + f"; found {sorted(extra_files(out, []))}"
    assert extra_files(out, expected.values()) == []


@pytest.mark.parametrize("spec", VARIANTS, ids=lambda s: s.label.replace(" ", "-"))
def test_peer_fetches_a_tree_of_awkward_names(spec: ToolSpec, served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fetch(spec, served, "ds one", tmp_path)


@pytest.mark.parametrize("spec", ONE_FILE, ids=lambda s: s.label.replace(" ", "-"))
def test_peer_fetches_one_file(spec: ToolSpec, served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fetch(spec, served, "single", tmp_path)

