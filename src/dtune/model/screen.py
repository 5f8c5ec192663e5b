"""Which history rows ``dtune model build`` learns from, and why the others are left out.

A row describes what θ gave only when the transfer ran to its end on a link
dtune knew: ``screen(rows)`` keeps those and returns every other row with
its reasons, as data — the command line only words them (``model/cli.py``).
Rows are dicts with the history's column names, as ``HistoryStore.rows()``
yields them or as ``dtune history export`` writes them (CSV text is fine:
numbers may be strings, an empty field is NULL).

A row is left out, for each of these that holds (``REASONS``, in order):

=================== ===================================================================
not-a-number        a number column holds something else (a hand-edited CSV)
failed              exit status 1: some files were not verified
interrupted         any other non-zero exit status (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)
no-key              a key attribute is NULL: the row cannot be placed in a tree
no-theta            cc, p or pp is NULL: the row does not say which θ it measured
assumed-rtt         ``rtt_how = 'assumed'``: dtune's 10 ms fallback, not the link's
assumed-bandwidth   ``bandwidth_how = 'assumed'``: the 1 Gbit/s fallback (``dtune get``
                    never probes the bandwidth; only ``--bandwidth`` makes it "given")
nothing-received    0 bytes or 0 Mbit/s: a rerun into a directory that held every file
no-outcome          neither throughput nor energy: nothing to learn
upload              ``direction = 'put'``: an upload (``dtune put``), whose θ means parts and
                    files sent, not ranges fetched; the tree is learnt from gets only
=================== ===================================================================

``cpu_num``/``cpu_freq`` NULL is kept ("not applied"); so is an assumed TCP
buffer. When the kept rows hold both measured and estimated energy figures,
the less common kind is set aside for the energy surfaces (the rows keep
their throughput), so that one surface never mixes the two.

Pure: no I/O, no numpy; the input rows are not changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

KEY_COLUMNS = ("avg_file_size", "file_count", "rtt_ms", "tcp_buffer", "bandwidth_mbps")
THETA_NEEDED = ("cc", "p", "pp")        # cpu_num / cpu_freq NULL means "not applied"
NUMBER_COLUMNS = (*KEY_COLUMNS, "cc", "p", "pp", "cpu_num", "cpu_freq", "throughput_mbps", "energy_j",
                  "bytes", "exit_status")
FAILED_STATUS = 1                       # dtune get: some file not verified; others are interrupts

# Every reason, in the order the checks run and the messages list them.
REASONS = ("not-a-number", "failed", "interrupted", "no-key", "no-theta", "assumed-rtt",
           "assumed-bandwidth", "nothing-received", "no-outcome", "upload")


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a row was left out: a code of ``REASONS``, the column it concerns and the value found.

    ``column`` is set where it tells reasons of one code apart (``not-a-number``,
    ``no-key``, ``no-theta``); ``value`` is the field as found (``not-a-number``),
    the exit status (``failed``, ``interrupted``) or the assumed figure.
    """

    code: str
    column: str | None = None
    value: object = None

    @property
    def kind(self) -> tuple[str, str | None]:
        """What rows are counted by: the code and the column (not the value)."""
        return (self.code, self.column)

    @property
    def name(self) -> str:
        """``code`` or ``code:column`` (``no-key:tcp_buffer``): the reason kind as one word."""
        return self.code if self.column is None else f"{self.code}:{self.column}"


@dataclass(frozen=True, slots=True)
class LeftOut:
    """One row that is not learned from: its position in the input, the row, and every reason."""

    index: int
    row: Mapping[str, object]
    reasons: tuple[Reason, ...]


@dataclass(frozen=True, slots=True)
class Screening:
    """``screen``'s answer: the usable rows (copies), the rows left out, and the energy kind kept.

    ``energy_set_aside`` counts the usable rows whose energy figure was of the
    other kind and was removed from their copy.
    """

    usable: list[dict]
    left_out: list[LeftOut]
    energy_kind: str | None = None
    energy_set_aside: int = 0

    @property
    def total(self) -> int:
        return len(self.usable) + len(self.left_out)

    def counts(self) -> dict[tuple[str, str | None], int]:
        """Rows per reason kind, in ``REASONS`` order (a row with two reasons counts under both)."""
        counts: dict[tuple[str, str | None], int] = {}
        for item in self.left_out:
            for kind in dict.fromkeys(r.kind for r in item.reasons):
                counts[kind] = counts.get(kind, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (REASONS.index(kv[0][0]), _column_order(kv[0][1]))))

    def rows_for(self, kind: tuple[str, str | None]) -> list[LeftOut]:
        """The rows left out for one reason kind, in input order."""
        return [item for item in self.left_out if any(r.kind == kind for r in item.reasons)]


def _column_order(column: str | None) -> int:
    return NUMBER_COLUMNS.index(column) if column in NUMBER_COLUMNS else -1


def _missing(value: object) -> bool:
    if value is None or (isinstance(value, str) and not value.strip()):
        return True
    return isinstance(value, float) and math.isnan(value)


def _number(value: object) -> float | None:
    """The value as a float; None when missing; raises ValueError when it is not a number."""
    if _missing(value):
        return None
    if isinstance(value, bool):
        raise ValueError(value)
    x = float(value)  # type: ignore[arg-type]
    return None if math.isnan(x) else x


def reasons_for(row: Mapping[str, object]) -> tuple[Reason, ...]:
    """Every reason ``row`` cannot be learned from (empty: it is usable)."""
    numbers: dict[str, float | None] = {}
    why: list[Reason] = []
    for name in NUMBER_COLUMNS:
        try:
            numbers[name] = _number(row.get(name))
        except (TypeError, ValueError):
            numbers[name] = None
            why.append(Reason("not-a-number", name, row.get(name)))
    bad = {r.column for r in why}
    status = numbers["exit_status"]
    if status is not None and status != 0:
        why.append(Reason("failed" if status == FAILED_STATUS else "interrupted", value=int(status)))
    why += [Reason("no-key", c) for c in KEY_COLUMNS if numbers[c] is None and c not in bad]
    why += [Reason("no-theta", c) for c in THETA_NEEDED if numbers[c] is None and c not in bad]
    if str(row.get("rtt_how") or "").strip() == "assumed":
        why.append(Reason("assumed-rtt", value=numbers["rtt_ms"]))
    if str(row.get("bandwidth_how") or "").strip() == "assumed":
        why.append(Reason("assumed-bandwidth", value=numbers["bandwidth_mbps"]))
    received, throughput = numbers["bytes"], numbers["throughput_mbps"]
    if received == 0 or throughput == 0:
        why.append(Reason("nothing-received"))
    elif throughput is None and numbers["energy_j"] is None and not {"throughput_mbps", "energy_j"} & bad:
        why.append(Reason("no-outcome"))
    if str(row.get("direction") or "get").strip() == "put":
        why.append(Reason("upload"))
    return tuple(why)


def screen(rows: Iterable[Mapping[str, object]]) -> Screening:
    """Split history rows into the usable ones (copies) and the ones left out with their reasons."""
    usable: list[dict] = []
    left_out: list[LeftOut] = []
    for i, row in enumerate(rows):
        why = reasons_for(row)
        if why:
            left_out.append(LeftOut(i, row, why))
        else:
            usable.append(dict(row))
    kinds: dict[str, int] = {}
    for row in usable:
        kind = row.get("energy_kind")
        if not _missing(row.get("energy_j")) and kind:
            kinds[str(kind)] = kinds.get(str(kind), 0) + 1
    kept = max(kinds, key=lambda k: (kinds[k], k == "measured")) if kinds else None
    set_aside = 0
    if len(kinds) > 1:
        for row in usable:
            if row.get("energy_kind") != kept and not _missing(row.get("energy_j")):
                row["energy_j"] = None
                set_aside += 1
    return Screening(usable, left_out, kept, set_aside)
