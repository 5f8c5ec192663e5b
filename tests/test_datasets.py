"""Dataset generator: size distributions (pure planning), determinism, incompressibility, CLI."""

from __future__ import annotations

import statistics
import zlib
from pathlib import Path

import pytest

from dtune.cli import main
from dtune.errors import DtuneError
from dtune.testbed.datasets import KB, MB, PRESETS, make_dataset, plan_dataset, summarize


def sizes(preset: str, scale: float = 1.0, seed: int = 0) -> list[int]:
    return [s for _, s in plan_dataset(preset, scale, seed)]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_plan_is_deterministic_per_seed(preset: str) -> None:
    assert plan_dataset(preset, seed=3) == plan_dataset(preset, seed=3)
    assert sizes(preset, seed=3) != sizes(preset, seed=4)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_names_are_unique_relative_and_under_the_preset_dir(preset: str) -> None:
    names = [n for n, _ in plan_dataset(preset)]
    assert len(set(names)) == len(names)
    assert all(n.startswith(f"{preset}/") and ".." not in n.split("/") for n in names)
    assert any(n.count("/") >= 1 for n in names)


@pytest.mark.parametrize("preset, mean, sd", [("html", 100 * KB, 29 * KB), ("images", 2.4 * MB, 0.27 * MB)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_normal_presets_match_mean_and_spread(preset: str, mean: float, sd: float, seed: int) -> None:
    s = sizes(preset, seed=seed)
    assert statistics.fmean(s) == pytest.approx(mean, rel=0.02)
    assert statistics.stdev(s) == pytest.approx(sd, rel=0.10)


def test_html_default_is_2000_files_of_about_100kb() -> None:
    s = summarize(plan_dataset("html"))
    assert s["files"] == 2000 and 190 * MB < s["bytes"] < 210 * MB
    assert s["min"] >= 1 * KB


@pytest.mark.parametrize("seed", range(5))
def test_video_is_a_few_files_around_223mb(seed: int) -> None:
    s = sizes("video", seed=seed)
    assert len(s) == 4
    assert all(150 * MB < x < 300 * MB for x in s)
    assert statistics.fmean(s) == pytest.approx(223 * MB, rel=0.08)


def test_genome_fractions_hold_exactly() -> None:
    s = sizes("genome")
    n = len(s)
    assert n == 1000
    assert sum(x < 100 * KB for x in s) / n == pytest.approx(0.45, abs=0.002)
    assert sum(x < 1 * MB for x in s) / n == pytest.approx(0.93, abs=0.002)
    assert 3 <= sum(x >= 32 * MB for x in s) <= 7        # "a few large files"
    assert 0.5e9 < sum(s) < 2e9


def test_mixed_is_log_uniform_over_its_range() -> None:
    s = sorted(sizes("mixed"))
    assert s[0] >= 20 * KB and s[-1] <= 100 * MB
    geometric_middle = (20 * KB * 100 * MB) ** 0.5
    assert geometric_middle / 1.5 < statistics.median(s) < geometric_middle * 1.5
    # log-uniform: each decade holds about the same number of files
    decades = [sum(10**k <= x < 10 ** (k + 1) for x in s) for k in (5, 6, 7)]
    assert max(decades) - min(decades) <= 3


@pytest.mark.parametrize("preset", ["html", "images", "mixed", "genome"])
def test_scale_multiplies_file_count(preset: str) -> None:
    assert len(sizes(preset, scale=0.1)) == round(PRESETS[preset].files * 0.1)
    assert len(sizes(preset, scale=2)) == PRESETS[preset].files * 2


def test_scale_multiplies_video_sizes() -> None:
    small = sizes("video", scale=0.1)
    assert len(small) == 4
    assert statistics.fmean(small) == pytest.approx(22.3 * MB, rel=0.08)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_bad_scale_is_refused(bad: float) -> None:
    with pytest.raises(DtuneError, match="scale"):
        plan_dataset("html", bad)


def test_unknown_preset_is_refused() -> None:
    with pytest.raises(DtuneError, match="unknown preset"):
        plan_dataset("audio")


def test_written_files_have_planned_sizes_and_repeat_byte_for_byte(tmp_path: Path) -> None:
    a = make_dataset("html", tmp_path / "a", scale=0.005, seed=9)
    b = make_dataset("html", tmp_path / "b", scale=0.005, seed=9)
    assert a == b and len(a) == 10
    for rel, size in a:
        data = (tmp_path / "a" / rel).read_bytes()
        assert len(data) == size
        assert data == (tmp_path / "b" / rel).read_bytes()
    written = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert written == sorted(rel for rel, _ in a)          # nothing but the files


def test_other_seed_gives_other_bytes(tmp_path: Path) -> None:
    (rel, _), = make_dataset("video", tmp_path / "a", scale=0.0005, seed=1)[:1]
    make_dataset("video", tmp_path / "b", scale=0.0005, seed=2)
    assert (tmp_path / "a" / rel).read_bytes()[:4096] != (tmp_path / "b" / rel).read_bytes()[:4096]


def test_bytes_are_incompressible(tmp_path: Path) -> None:
    files = make_dataset("video", tmp_path, scale=0.005, seed=0)   # 4 files of ~1.1 MB
    data = (tmp_path / files[0][0]).read_bytes()
    assert len(zlib.compress(data, 6)) > 0.99 * len(data)
    chunks = [data[i:i + 64] for i in range(0, len(data) - 63, 64)]
    assert len(set(chunks)) == len(chunks)                   # no repeated blocks either


def test_cli_make_writes_and_summarises(tmp_path: Path, capsys) -> None:
    assert main(["dataset", "make", "images", str(tmp_path), "--scale", "0.01", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "images" in out and "p50" in out
    assert len(list((tmp_path / "images").rglob("*.jpg"))) == 2


def test_cli_dry_run_writes_nothing(tmp_path: Path, capsys) -> None:
    assert main(["dataset", "make", "genome", str(tmp_path / "g"), "--dry-run", "--json"]) == 0
    assert '"files": 1000' in capsys.readouterr().out
    assert not (tmp_path / "g").exists()


def test_cli_rejects_unknown_preset(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["dataset", "make", "audio", str(tmp_path)])
    assert info.value.code == 2
