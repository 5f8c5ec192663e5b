"""CSV in and out of the history: dtune's own format and the seed paper's Table I.

dtune's own format is one column per ``transfers`` column (``COLUMNS``),
named exactly like it, in the table's units; JSON columns hold compact JSON;
an empty field is NULL. ``id`` is ignored on import (new ids are given) and
``origin`` is kept, so merging another machine's history keeps 'dtune',
'sweep' and 'import' rows apart; a missing or empty origin becomes 'import'.

Table I of the decision-tree seed ("Historical transfer log sample")
has the columns below; header matching ignores case, spaces and
punctuation, so ``#of Files``, ``# of files`` and ``Number of Files`` are the
same. Its units are converted to ours:

=========================  ==================  ================================
Table I column             dtune column        conversion
=========================  ==================  ================================
Entry No                   (ignored)
File Size (kB)             avg_file_size       × 1000 → bytes
#of Files                  file_count
RTT(ms)                    rtt_ms
TCP Buffer Size(MB)        tcp_buffer          × 10^6 → bytes
Bandwidth (Mbps)           bandwidth_mbps
Throughput (Mbps)          throughput_mbps
Transfer Energy(J)         energy_j
C                          cc
P                          p
PP                         pp
#of CPU                    cpu_num
CPU Frequency(Hz)          cpu_freq            → kHz, unit guessed by magnitude
=========================  ==================  ================================

The seed labels the frequency "Hz" but prints 1.3 and 1.5, i.e. GHz, so a
value under 100 is read as GHz, under 10^5 as MHz, under 10^8 as kHz and
anything larger as Hz (real CPU clocks, 0.1–10 GHz, fall in exactly one
band whatever the unit). Headers ``CPU Frequency (GHz)``, ``(MHz)`` or
``(kHz)`` are taken at their word. ``total_bytes`` is derived as file size ×
file count. Any of dtune's own column names may appear next to the Table I
columns (``source``, ``dataset_id``, ``started_at``, ``energy_kind`` ...). Table I
rows are stored with origin 'import'. A comma, tab or semicolon separates
fields (the seed's table is tab-separated).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable
from typing import IO

from dtune.errors import DtuneError
from dtune.history.row import (
    COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    JSON_COLUMNS,
    TransferRecord,
    json_text,
    json_value,
)

Convert = Callable[[str], object]


def write_csv(fh: IO[str], rows: Iterable[dict]) -> int:
    """Write rows (dicts with ``COLUMNS``) as dtune's CSV; return how many."""
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(COLUMNS)
    n = 0
    for row in rows:
        writer.writerow([_cell(name, row.get(name)) for name in COLUMNS])
        n += 1
    return n


def _cell(name: str, value: object) -> str:
    if value is None:
        return ""
    if name in JSON_COLUMNS:
        return json_text(value, sort_keys=True, separators=(",", ":"))
    if isinstance(value, float):
        return repr(value)   # shortest text that reads back to the same float
    return str(value)


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------
class _LineError(Exception):
    """A problem with one field; ``read_csv`` adds the file and line."""


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        pass
    x = _float(text)
    if not x.is_integer():
        raise _LineError(f"{text!r} is not a whole number")
    return int(x)


def _float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise _LineError(f"{text!r} is not a number") from None
    if not math.isfinite(x):
        raise _LineError(f"{text!r} is not a finite number")
    return x


def _json(text: str) -> object:
    try:
        value = json_value(text)
    except json.JSONDecodeError as exc:
        raise _LineError(f"bad JSON ({exc.msg} at character {exc.pos})") from None
    if value is not None and not isinstance(value, dict):
        raise _LineError("JSON must be an object")
    return value


def _scaled(factor: float, parse: Convert = _float) -> Convert:
    return lambda text: round(parse(text) * factor)


def _freq_guess_khz(text: str) -> int:
    """A CPU frequency in GHz, MHz, kHz or Hz (chosen by magnitude) → kHz."""
    x = _float(text)
    if x <= 0:
        raise _LineError(f"{text!r} is not a CPU frequency")
    for limit, factor in ((100, 1e6), (1e5, 1e3), (1e8, 1.0)):
        if x < limit:
            return round(x * factor)
    return round(x / 1e3)


def _own(name: str) -> Convert:
    if name in JSON_COLUMNS:
        return _json
    if name in INT_COLUMNS:
        return _int
    if name in FLOAT_COLUMNS:
        return _float
    return str


# Table I header (normalised: lower case, letters and digits only) → (column, conversion)
TABLE_I: dict[str, tuple[str, Convert] | None] = {
    "entryno": None, "entry": None, "no": None,
    "filesizekb": ("avg_file_size", _scaled(1000)),
    "avgfilesizekb": ("avg_file_size", _scaled(1000)),
    "averagefilesizekb": ("avg_file_size", _scaled(1000)),
    "offiles": ("file_count", _int), "numberoffiles": ("file_count", _int),
    "nooffiles": ("file_count", _int),
    "rttms": ("rtt_ms", _float),
    "tcpbuffersizemb": ("tcp_buffer", _scaled(1e6)), "buffersizemb": ("tcp_buffer", _scaled(1e6)),
    "bandwidthmbps": ("bandwidth_mbps", _float),
    "throughputmbps": ("throughput_mbps", _float),
    "transferenergyj": ("energy_j", _float), "energyj": ("energy_j", _float),
    "c": ("cc", _int), "cc": ("cc", _int), "p": ("p", _int), "pp": ("pp", _int),
    "ofcpu": ("cpu_num", _int), "ofcpus": ("cpu_num", _int), "numberofcpu": ("cpu_num", _int),
    "numberofcpus": ("cpu_num", _int), "cpucores": ("cpu_num", _int),
    "cpufrequencyhz": ("cpu_freq", _freq_guess_khz), "cpufrequency": ("cpu_freq", _freq_guess_khz),
    "cpufrequencyghz": ("cpu_freq", _scaled(1e6)), "cpufrequencymhz": ("cpu_freq", _scaled(1e3)),
    "cpufrequencykhz": ("cpu_freq", _int),
}


def _normalise(header: str) -> str:
    return re.sub(r"[^a-z0-9]", "", header.lower())


def _delimiter(first_line: str) -> str:
    if "," in first_line:
        return ","
    if "\t" in first_line:
        return "\t"
    return ";" if ";" in first_line else ","


def _plan(header: list[str], where: str) -> tuple[str, list[tuple[str, Convert] | None]]:
    """Which column each field goes to: ('dtune' | 'table-i', one entry per field)."""
    header = [h.strip() for h in header]
    if all(h in COLUMNS for h in header):
        fmt, plan = "dtune", [(h, _own(h)) for h in header]
    else:
        fmt, plan, unknown = "table-i", [], []
        for h in header:
            if h in COLUMNS:
                plan.append((h, _own(h)))
            elif _normalise(h) in TABLE_I:
                plan.append(TABLE_I[_normalise(h)])
            else:
                plan.append(None)
                unknown.append(h)
        if unknown:
            raise DtuneError(f"{where} line 1: unknown column{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(repr(u) for u in unknown)}; expected dtune's export "
                             "(see `dtune history export`) or the seed's Table I columns "
                             "(File Size (kB), #of Files, RTT(ms), TCP Buffer Size(MB), Bandwidth (Mbps), "
                             "Throughput (Mbps), Transfer Energy(J), C, P, PP, #of CPU, CPU Frequency(Hz))")
    seen: dict[str, str] = {}
    for h, target in zip(header, plan, strict=True):
        if target is None:
            continue
        if target[0] in seen:
            raise DtuneError(f"{where} line 1: columns {seen[target[0]]!r} and {h!r} both give {target[0]}")
        seen[target[0]] = h
    if not seen:
        raise DtuneError(f"{where} line 1: no usable column")
    return fmt, plan


def read_csv(fh: IO[str], name: str) -> list[TransferRecord]:
    """Parse a whole CSV file into records, or raise ``DtuneError`` naming the file and line."""
    where = f"history import {name}"
    try:
        text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise DtuneError(f"{where}: cannot read: {exc}") from None
    text = text.removeprefix("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(text.split("\n", 1)[0]))
    try:
        header = next(reader, None)
        if not header or not any(h.strip() for h in header):
            raise DtuneError(f"{where} line 1: empty file, expected a header line")
        fmt, plan = _plan(header, where)
        records = []
        for fields in reader:
            line = reader.line_num
            if not fields or not any(f.strip() for f in fields):
                continue
            if len(fields) != len(plan):
                raise DtuneError(f"{where} line {line}: {len(fields)} fields, the header has {len(plan)}")
            try:
                records.append(_record(fields, plan, fmt, header))
            except _LineError as exc:
                raise DtuneError(f"{where} line {line}: {exc}") from None
    except csv.Error as exc:
        raise DtuneError(f"{where} line {reader.line_num}: {exc}") from None
    return records


def _record(fields: list[str], plan: list[tuple[str, Convert] | None], fmt: str,
            header: list[str]) -> TransferRecord:
    values: dict[str, object] = {}
    for text, target, label in zip(fields, plan, header, strict=True):
        text = text.strip()
        if target is None or text == "":
            continue
        column, convert = target
        try:
            values[column] = convert(text)
        except _LineError as exc:
            raise _LineError(f"column {label.strip()!r}: {exc}") from None
    values.pop("id", None)
    if not values.get("origin"):
        values["origin"] = "import"
    if not values.get("direction"):
        values["direction"] = "get"   # (a history exported before dtune put recorded only gets)
    if fmt == "table-i" and values.get("total_bytes") is None \
            and values.get("avg_file_size") is not None and values.get("file_count") is not None:
        values["total_bytes"] = round(values["avg_file_size"] * values["file_count"])
    record = TransferRecord(**values)
    try:
        record.check()
    except ValueError as exc:
        raise _LineError(str(exc)) from None
    return record
