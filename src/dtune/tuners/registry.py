"""Which tuners there are: a name, one line of help, how to build it, and the rule behind ``auto``.

``dtune get --tuner`` takes its choices and its help from ``ENTRIES``, and the
README's tuner table is ``markdown_table()`` (a test keeps the two equal:
``registry.markdown_table()`` prints it). A tuner's module is
imported when that tuner is built, not when the command line is parsed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dtune.model.paths import default_model_path
from dtune.tuners.base import Fixed, Tuner

STATIC_CHUNK = 8 << 20  # the static-chunks baseline's range: the size the MDTP paper compares against


@dataclass(frozen=True, slots=True)
class Request:
    """What the user asked for, as every tuner's factory reads it.

    ``min_throughput`` (Mbit/s), ``max_energy`` (J), ``sla`` and ``model`` are
    the decision-tree tuner's; ``replicas`` and ``files`` feed the auto rule.
    """

    fixed: Fixed = field(default_factory=Fixed)
    max_cc: int = 16
    max_partitions: int = 2
    replicas: int = 1
    files: int = 1
    sla: str | None = None
    min_throughput: float | None = None
    max_energy: float | None = None
    model: str | None = None
    online: bool = False                # the online search runs on top of the tuner


@dataclass(frozen=True, slots=True)
class Entry:
    """One tuner of ``--tuner``: its name, what it does and how it is built."""
    name: str
    summary: str                        # one line, Markdown: the README table and ``--help``
    build: Callable[[Request], Tuner]
    online: bool = False                # the online search runs by default (--online / --no-online)


def auto_choice(req: Request) -> str:
    """``auto``: MDTP with replicas; else the decision tree when a model file exists (it falls
    back to ProMC when the model knows nothing close); else ProMC."""
    if req.replicas > 1:
        return "mdtp"
    if Path(req.model or default_model_path()).expanduser().exists():
        return "dtree"
    return "promc"


def _auto(req: Request) -> Tuner:
    choice = auto_choice(req)
    if choice == "dtree":
        return _dtree(req, auto=True)
    return BY_NAME[choice].build(req)


def _heuristic(mode: str) -> Callable[[Request], Tuner]:
    def build(req: Request) -> Tuner:
        from dtune.tuners.promc import HeuristicTuner  # (a tuner's module loads when it is picked)
        return HeuristicTuner(mode, max_cc=req.max_cc, max_partitions=req.max_partitions, fixed=req.fixed)
    return build


def _dtree(req: Request, *, auto: bool = False) -> Tuner:
    from dtune.tuners.dtree import DTreeTuner  # (a tuner's module loads when it is picked)
    return DTreeTuner(req.sla or "max-throughput", model=req.model, min_throughput=req.min_throughput,
                      max_energy=req.max_energy, max_cc=req.max_cc, max_partitions=req.max_partitions,
                      auto=auto, online=req.online, fixed=req.fixed)


def _golike(req: Request) -> Tuner:
    from dtune.tuners.golike import GoLikeTuner  # (a tuner's module loads when it is picked)
    return GoLikeTuner(fixed=req.fixed)


def _static(req: Request) -> Tuner:
    from dtune.tuners.static import StaticTuner  # (a tuner's module loads when it is picked)
    return StaticTuner(fixed=req.fixed)


def _mdtp(chunks: int | None) -> Callable[[Request], Tuner]:
    def build(req: Request) -> Tuner:
        from dtune.tuners.mdtp import MdtpTuner  # (a tuner's module loads when it is picked)
        return MdtpTuner(static_chunks=chunks, fixed=req.fixed)
    return build


def _ditacchio(sla: str) -> Callable[[Request], Tuner]:
    def build(req: Request) -> Tuner:
        from dtune.tuners.ditacchio import DiTacchioTuner  # (a tuner's module loads when it is picked)
        return DiTacchioTuner(sla, fixed=req.fixed)
    return build


ENTRIES: tuple[Entry, ...] = (
    Entry("auto", "ProMC; MDTP with replicas; the decision tree when a model "
                  "built by `dtune model build` knows this kind of transfer; then the online search "
                  "sizes the connections while the transfer runs (with replicas, MDTP's climber does)",
          _auto, online=True),
    Entry("promc", "size partitions, Algorithm 1 per partition, groups shared by δ-weighted bytes and "
                   "re-allocated online (docs/algorithms.md §1.5)", _heuristic("promc")),
    Entry("mc", "size partitions at once, Algorithm 1 per partition, groups dealt round-robin, hand-over "
                "(§1.4)", _heuristic("mc")),
    Entry("sc", "size partitions one after another, Algorithm 1 each (§1.3)", _heuristic("sc")),
    Entry("golike", "one partition, cc/p/pp from a table by average size: GO-like (approximation) (§1.6)",
          _golike),
    Entry("static", "fixed cc/p/pp, unset values from a size rule: the baseline every report compares "
                    "against", _static),
    Entry("mdtp", "several replicas: ranges per replica by bin packing, connections climbed (§3)",
          _mdtp(None)),
    Entry("static-chunks", "several replicas, the baseline: equal 8 MiB ranges, one connection each (§3.7)",
          _mdtp(STATIC_CHUNK)),
    Entry("dtree", "θ from a decision-search-tree model of past transfers, re-tuned online; "
                   "`--sla max-throughput|min-energy` (§2); the online search on top", _dtree, online=True),
    Entry("ditacchio-max", "Di Tacchio et al.'s throughput heuristic, as a baseline (§2.6)",
          _ditacchio("max-throughput")),
    Entry("ditacchio-energy", "Di Tacchio et al.'s energy heuristic, as a baseline (§2.6)",
          _ditacchio("min-energy")),
)
BY_NAME: dict[str, Entry] = {e.name: e for e in ENTRIES}
TUNERS: tuple[str, ...] = tuple(BY_NAME)
DEFAULT = "auto"


def make_tuner(name: str, *, fixed: Fixed | Mapping[str, int] | None = None, max_cc: int = 16,
               max_partitions: int = 2, replicas: int = 1, files: int = 1, sla: str | None = None,
               min_throughput: float | None = None, max_energy: float | None = None,
               model: str | None = None, online: bool = False) -> Tuner:
    """The tuner called ``name`` for this request (see ``Request`` for the arguments)."""
    entry = BY_NAME.get(name)
    if entry is None:
        raise ValueError(f"unknown tuner {name!r} (known: {', '.join(TUNERS)})")
    req = Request(Fixed.of(fixed), max_cc, max_partitions, replicas, files, sla, min_throughput,
                  max_energy, model, online)
    return entry.build(req)


_SECTION = re.compile(r"\s*\((?:docs/algorithms\.md )?§[0-9.–]+\)")


def online_default(name: str) -> bool:
    """Does the online search run under this tuner unless told otherwise?"""
    return BY_NAME[name].online


def help_text() -> str:
    """``--tuner``'s help: every tuner with its line (without the section references)."""
    lines = "; ".join(f"{e.name} ({_SECTION.sub('', e.summary).replace('`', '')})" for e in ENTRIES)
    return f"how unset parameters are chosen and revised: {lines}; default {DEFAULT}. " \
           "docs/algorithms.md describes each"


def markdown_table() -> str:
    """The README's tuner table."""
    rows = ["| tuner | what it does |", "|---|---|"]
    for e in ENTRIES:
        name = f"`{e.name}`" + (" (default)" if e.name == DEFAULT else "")
        rows.append(f"| {name} | {e.summary.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
