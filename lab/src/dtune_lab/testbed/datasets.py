"""Synthetic datasets shaped like the papers' ones: deterministic and incompressible.

Theory of operation
-------------------
``plan_dataset(preset, scale, seed)`` is pure: it returns ``[(relpath, size)]``
and never touches the disk. Sizes are drawn by *stratified* inverse-CDF
sampling -- file i gets the quantile ``(i + U) / n`` with U uniform -- so even
a small dataset has the preset's mean, spread and tail fractions (45 % of
genome files under 100 KB is 45 %, not 45 % +- noise), and then the order is
shuffled so names and sizes are unrelated. ``make_dataset`` writes each file
from ``random.Random`` seeded with SHA-256 of (seed, relpath): the same seed
gives the same bytes on any machine (``randbytes`` is stable since 3.9), the
bytes do not compress (so no transfer tool can cheat with compression), and
generation runs at several hundred MB/s.

Sizes use decimal units (1 KB = 1000 bytes, 1 MB = 10^6), as the papers do.

``multiply_small(plan, below, factor)`` (also pure) gives every file smaller
than ``below`` bytes ``factor - 1`` copies of the same size next to it
(``obj-00012.dat`` -> ``obj-00012-copy1.dat``): more small files without
changing the large ones, to see how a tool copes with per-file overhead.
The copies' bytes differ from the original's because bytes derive from the
relpath.

Presets (defaults fit a 2-core machine; ``scale`` multiplies the file count,
except for ``video`` whose few files get their *sizes* multiplied):

=========  =======  =======================================  ==========
preset     files    size per file                            total
=========  =======  =======================================  ==========
html       2000     normal, 100 KB +- 29 KB                  ~200 MB
images     250      normal, 2.4 MB +- 0.27 MB                ~600 MB
video      4        normal, 223 MB +- 15 MB (scale = size)   ~890 MB
mixed      64       log-uniform 20 KB .. 100 MB (the 1 MB ..  ~750 MB
                    5 GB spread of the paper, divided by 50)
genome     1000     45 % < 100 KB, 93 % < 1 MB, 6.5 % 1-32   ~1.1 GB
                    MB, 0.5 % 32-128 MB (log-uniform pieces)
granules   120      uniform 0.5 .. 8 MB (a satellite product's  ~510 MB
                    granules: the multi-source dataset case)
=========  =======  =======================================  ==========
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dtune.errors import DtuneError

KB = 1000
MB = 1000 * 1000
CHUNK = 4 * 1024 * 1024


def _normal(mean: float, sd: float, floor: int) -> Callable[[float], float]:
    dist = statistics.NormalDist(mean, sd)
    return lambda u: max(floor, dist.inv_cdf(u))


def _uniform(lo: float, hi: float) -> Callable[[float], float]:
    return lambda u: lo + (hi - lo) * u


def _log_uniform(lo: float, hi: float) -> Callable[[float], float]:
    return lambda u: lo * (hi / lo) ** u


def _pieces(parts: Sequence[tuple[float, float, float]]) -> Callable[[float], float]:
    """A mixture of log-uniform pieces ``(weight, lo, hi)``; weights sum to 1."""
    def inv(u: float) -> float:
        acc = 0.0
        for k, (weight, lo, hi) in enumerate(parts):
            if u < acc + weight or k == len(parts) - 1:
                v = min(max((u - acc) / weight, 0.0), 1.0)
                return lo * (hi / lo) ** v
            acc += weight
        raise ValueError("no pieces")
    return inv


GENOME_PIECES = ((0.45, 1 * KB, 100 * KB), (0.48, 100 * KB, 1 * MB),
                 (0.065, 1 * MB, 32 * MB), (0.005, 32 * MB, 128 * MB))


def _genome_name(i: int, size: int) -> str:
    if size >= 32 * MB:
        return f"genome/aligned/sample-{i:05d}.bam"
    if size >= 1 * MB:
        return f"genome/variants/{i // 100:03d}/calls-{i:05d}.vcf.gz"
    return f"genome/reads/{i // 100:03d}/reads-{i:05d}.fastq.gz"


@dataclass(frozen=True)
class Preset:
    """A dataset shape: how many files, the size quantile function, the file names."""

    name: str
    description: str
    files: int
    quantile: Callable[[float], float]
    relpath: Callable[[int, int], str]
    scale_sizes: bool = False  # True: --scale multiplies sizes (few-file presets)


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("html", "web pages, normal 100 KB +- 29 KB", 2000, _normal(100 * KB, 29 * KB, 1 * KB),
           lambda i, s: f"html/{i // 500:03d}/page-{i:05d}.html"),
    Preset("images", "images, normal 2.4 MB +- 0.27 MB", 250, _normal(2.4 * MB, 0.27 * MB, 10 * KB),
           lambda i, s: f"images/{i // 100:03d}/img-{i:05d}.jpg"),
    Preset("video", "video files, normal 223 MB +- 15 MB", 4, _normal(223 * MB, 15 * MB, 1 * MB),
           lambda i, s: f"video/clip-{i:03d}.mp4", scale_sizes=True),
    Preset("mixed", "log-uniform 20 KB .. 100 MB (1 MB .. 5 GB shape, /50)", 64,
           _log_uniform(20 * KB, 100 * MB), lambda i, s: f"mixed/run-{i // 16:03d}/obj-{i:05d}.dat"),
    Preset("genome", "45 % < 100 KB, 93 % < 1 MB, a few files of 32-128 MB", 1000,
           _pieces(GENOME_PIECES), _genome_name),
    Preset("granules", "uniform 0.5 MB .. 8 MB", 120, _uniform(0.5 * MB, 8 * MB),
           lambda i, s: f"granules/{i // 40:02d}/granule-{i:04d}.nc"),
)}


def _preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise DtuneError(f"dataset: unknown preset {name!r} (have {', '.join(PRESETS)})") from None


def plan_dataset(preset: str, scale: float = 1.0, seed: int = 0) -> list[tuple[str, int]]:
    """The files of a dataset as ``[(relpath, size)]``, without writing anything.

    Pure and deterministic: the same (preset, scale, seed) gives the same list.
    """
    p = _preset(preset)
    if not (scale > 0 and math.isfinite(scale)):
        raise DtuneError(f"dataset {preset}: scale must be a positive number, got {scale}")
    rng = random.Random(f"dtune-dataset:{preset}:{seed}")
    n = p.files if p.scale_sizes else max(1, round(p.files * scale))
    factor = scale if p.scale_sizes else 1.0
    sizes = []
    for i in range(n):
        u = min(max((i + rng.random()) / n, 1e-12), 1 - 1e-12)
        sizes.append(max(1, int(p.quantile(u) * factor)))
    rng.shuffle(sizes)
    return [(p.relpath(i, size), size) for i, size in enumerate(sizes)]


COPY_INFIX = "-copy"
# A thousand copies of each small file already turns the 2000-file html preset
# into two million files; more is a typo, not an experiment.
MAX_SMALL_FACTOR = 1000


def copy_relpath(relpath: str, k: int) -> str:
    """The name of copy ``k`` of ``relpath``: ``-copy<k>`` before the first dot of the file name.

    ``run-000/obj-00012.dat`` -> ``run-000/obj-00012-copy1.dat``,
    ``reads-00001.fastq.gz`` -> ``reads-00001-copy1.fastq.gz``.
    """
    slash = relpath.rfind("/") + 1
    dot = relpath.find(".", slash + 1)  # a leading dot belongs to the name, not the extension
    if dot < 0:
        dot = len(relpath)
    return f"{relpath[:dot]}{COPY_INFIX}{k}{relpath[dot:]}"


def check_small_files(below: int | None, factor: int) -> None:
    """Raise DtuneError unless ``(below, factor)`` is a valid small-file multiplication."""
    if isinstance(factor, bool) or not isinstance(factor, int) or not 1 <= factor <= MAX_SMALL_FACTOR:
        raise DtuneError(f"dataset: small_factor must be an integer in 1..{MAX_SMALL_FACTOR}, got {factor!r}")
    if below is None:
        if factor > 1:
            raise DtuneError("dataset: small_factor needs small_below (the size in bytes under which "
                             "a file counts as small)")
        return
    if isinstance(below, bool) or not isinstance(below, int) or below <= 0:
        raise DtuneError(f"dataset: small_below must be a positive integer (bytes), got {below!r}")


def multiply_small(plan: Sequence[tuple[str, int]], below: int | None,
                   factor: int = 1) -> list[tuple[str, int]]:
    """``plan`` with ``factor - 1`` same-sized copies after every file smaller than ``below`` bytes.

    Pure and deterministic; ``factor = 1`` (or ``below = None``) returns the
    plan unchanged. Raises DtuneError if a copy's name is already taken.
    """
    check_small_files(below, factor)
    if factor == 1 or below is None:
        return list(plan)
    out = []
    for relpath, size in plan:
        out.append((relpath, size))
        if size < below:
            out += [(copy_relpath(relpath, k), size) for k in range(1, factor)]
    names = set()
    for relpath, _ in out:
        if relpath in names:
            raise DtuneError(f"dataset: copying small files: {relpath!r} is planned twice")
        names.add(relpath)
    return out


def file_bytes_seed(seed: int, relpath: str) -> int:
    return int.from_bytes(hashlib.sha256(f"dtune-bytes:{seed}:{relpath}".encode()).digest()[:16], "big")


def write_file(path: Path, size: int, key: int) -> None:
    """Write ``size`` incompressible bytes derived only from ``key``."""
    rng = random.Random(key)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, CHUNK)
            f.write(rng.randbytes(n))
            left -= n


def make_dataset(preset: str, directory: str | os.PathLike[str], scale: float = 1.0,
                 seed: int = 0, *, small_below: int | None = None,
                 small_factor: int = 1) -> list[tuple[str, int]]:
    """Write the dataset under ``directory`` (created) and return ``[(relpath, size)]``.

    ``small_below`` / ``small_factor``: see ``multiply_small``. Existing files
    with the same names are overwritten; nothing else is written.
    """
    plan = multiply_small(plan_dataset(preset, scale, seed), small_below, small_factor)
    write_plan(plan, directory, seed, what=f"dataset {preset}")
    return plan


def write_plan(plan: Sequence[tuple[str, int]], directory: str | os.PathLike[str], seed: int, *,
               what: str = "dataset") -> None:
    """Write every ``(relpath, size)`` of ``plan`` under ``directory``, bytes from (seed, relpath)."""
    root = Path(directory)
    made: set[Path] = set()
    for relpath, size in plan:
        path = root / relpath
        if path.parent not in made:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise DtuneError(f"{what}: cannot create {path.parent}: {exc.strerror}") from None
            made.add(path.parent)
        try:
            write_file(path, size, file_bytes_seed(seed, relpath))
        except OSError as exc:
            raise DtuneError(f"{what}: writing {path}: {exc.strerror}") from None


def summarize(files: Sequence[tuple[str, int]]) -> dict[str, float]:
    """Count, total bytes and size percentiles of a planned or written dataset."""
    sizes = sorted(s for _, s in files)
    if not sizes:
        return {"files": 0, "bytes": 0}

    def pct(q: float) -> int:
        return sizes[min(len(sizes) - 1, int(q * len(sizes)))]

    return {"files": len(sizes), "bytes": sum(sizes), "min": sizes[0], "p10": pct(0.10),
            "p50": pct(0.50), "p90": pct(0.90), "max": sizes[-1], "mean": sum(sizes) / len(sizes)}


def human(n: float) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"
