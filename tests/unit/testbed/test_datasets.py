"""Dataset generator: size distributions (pure planning), determinism, incompressibility, CLI."""

from __future__ import annotations

import statistics
import zlib
from pathlib import Path

import pytest
from dtune_lab.testbed.datasets import (
    KB,
    MB,
    PRESETS,
    copy_relpath,
    file_bytes_seed,
    make_dataset,
    multiply_small,
    plan_dataset,
    summarize,
)

from dtune.cli import main
from dtune.errors import DtuneError


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


def test_granules_are_120_files_uniform_between_half_a_megabyte_and_eight() -> None:
    s = sizes("granules")
    assert len(s) == 120 and 0.5 * MB <= min(s) and max(s) <= 8 * MB
    assert statistics.fmean(s) == pytest.approx(4.25 * MB, rel=0.05)
    assert 480 * MB < sum(s) < 540 * MB
    quarters = [sum(lo <= x < lo + 1.875 * MB for x in s) for lo in (0.5 * MB, 2.375 * MB, 4.25 * MB, 6.125 * MB)]
    assert min(quarters) >= 20                                # uniform: each quarter of the range holds ~30


def test_mixed_is_log_uniform_over_its_range() -> None:
    s = sorted(sizes("mixed"))
    assert s[0] >= 20 * KB and s[-1] <= 100 * MB
    geometric_middle = (20 * KB * 100 * MB) ** 0.5
    assert geometric_middle / 1.5 < statistics.median(s) < geometric_middle * 1.5
    # log-uniform: each decade holds about the same number of files
    decades = [sum(10**k <= x < 10 ** (k + 1) for x in s) for k in (5, 6, 7)]
    assert max(decades) - min(decades) <= 3


@pytest.mark.parametrize("preset", ["html", "images", "mixed", "genome", "granules"])
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


# --- more small files: multiply_small ---------------------------------------------

@pytest.mark.parametrize("relpath, copy", [
    ("mixed/run-000/obj-00012.dat", "mixed/run-000/obj-00012-copy1.dat"),
    ("genome/reads/000/reads-00001.fastq.gz", "genome/reads/000/reads-00001-copy1.fastq.gz"),
    ("d.x/noext", "d.x/noext-copy1"),
    (".hidden", ".hidden-copy1"),
    ("a/.h.x", "a/.h-copy1.x"),
])
def test_a_copy_is_named_before_the_first_dot_of_the_file_name(relpath: str, copy: str) -> None:
    assert copy_relpath(relpath, 1) == copy


@pytest.mark.parametrize("preset", ["mixed", "genome", "html"])
def test_every_small_file_gets_factor_minus_one_copies_of_its_size(preset: str) -> None:
    plan = plan_dataset(preset, scale=0.5, seed=1)
    below = 100 * KB
    out = multiply_small(plan, below, 3)
    small = [(rel, size) for rel, size in plan if size < below]
    assert small  # every preset above has some files under 100 KB at this seed
    assert len(out) == len(plan) + 2 * len(small)
    assert sum(s for _, s in out) == sum(s for _, s in plan) + 2 * sum(s for _, s in small)
    got = dict(out)
    for rel, size in small:
        assert got[copy_relpath(rel, 1)] == size and got[copy_relpath(rel, 2)] == size
    assert [x for x in out if "-copy" not in x[0]] == plan  # the originals, in order and unchanged


def test_copies_follow_their_original_and_large_files_get_none() -> None:
    plan = [("d/a.bin", 10), ("d/b.bin", 1000), ("d/c.bin", 99)]
    assert multiply_small(plan, 100, 2) == [("d/a.bin", 10), ("d/a-copy1.bin", 10), ("d/b.bin", 1000),
                                            ("d/c.bin", 99), ("d/c-copy1.bin", 99)]
    assert multiply_small(plan, 99, 2)[-1] == ("d/c.bin", 99)  # "smaller than": 99 is not below 99


def test_multiplied_names_are_unique_and_the_result_deterministic() -> None:
    plan = plan_dataset("genome", scale=0.3, seed=4)
    out = multiply_small(plan, 1 * MB, 4)
    names = [rel for rel, _ in out]
    assert len(set(names)) == len(names)
    assert out == multiply_small(plan_dataset("genome", scale=0.3, seed=4), 1 * MB, 4)


def test_copies_get_bytes_of_their_own() -> None:
    assert file_bytes_seed(0, "d/a.bin") != file_bytes_seed(0, copy_relpath("d/a.bin", 1))


@pytest.mark.parametrize("below", [None, 1, 10**12])
def test_factor_one_changes_nothing(below: int | None) -> None:
    plan = plan_dataset("mixed", seed=2)
    assert multiply_small(plan, below, 1) == plan


def test_a_copy_name_that_is_taken_is_refused() -> None:
    with pytest.raises(DtuneError, match="planned twice"):
        multiply_small([("a.bin", 1), ("a-copy1.bin", 5)], 2, 2)


@pytest.mark.parametrize("below, factor, message", [
    (None, 2, "small_factor needs small_below"),
    (100, 0, "small_factor must be an integer"),
    (100, 2.0, "small_factor must be an integer"),
    (100, True, "small_factor must be an integer"),
    (100, 10**6, "small_factor must be an integer"),
    (0, 2, "small_below must be a positive integer"),
    (1.5, 2, "small_below must be a positive integer"),
])
def test_bad_small_file_settings_are_refused(below, factor, message: str) -> None:
    with pytest.raises(DtuneError, match=message):
        multiply_small([("a.bin", 1)], below, factor)


def test_make_dataset_writes_exactly_the_multiplied_plan(tmp_path: Path) -> None:
    files = make_dataset("html", tmp_path, scale=0.005, seed=9, small_below=100 * KB, small_factor=2)
    assert files == multiply_small(plan_dataset("html", 0.005, 9), 100 * KB, 2)
    assert len(files) > 10
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(rel for rel, _ in files)
    copy, size = next((rel, size) for rel, size in files if rel.endswith("-copy1.html"))
    original = copy.replace("-copy1", "")
    assert (tmp_path / copy).stat().st_size == size == (tmp_path / original).stat().st_size
    assert (tmp_path / copy).read_bytes() != (tmp_path / original).read_bytes()
