"""From a finished transfer to one history row.

``record_from_result`` reads a ``TransferResult`` (files, accounting
snapshot, the tuning record and the per-second samples that
``dtune.transfer`` fills in) plus what only the caller knows (``plan_info``)
and returns a ``TransferRecord``. It does no I/O and reads no clock unless
``started_at`` is missing.

Which cc/p/pp a transfer "used": tuners change the parameters while the
transfer runs, and every sample carries the per-partition parameters that
were in effect during the second before it. The parameter set that moved
the most bytes is the one recorded (``params_json["used"]``, with the share
of bytes it moved in ``used_share``); the bytes after the last sample count
for the final parameters. Over partitions, cc is summed and p and pp are
cc-weighted means (rounded), so ``cc·p`` stays the number of TCP streams, the
quantity the decision tree's constraint ``cc·p <= N_streams`` bounds.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from dtune.history.lite import record, sqlite_path
from dtune.history.row import TransferRecord

if TYPE_CHECKING:
    from dtune.engine.result import TransferResult

DONE_STATUSES = ("done", "skipped", "kept")   # on disk: verified now, or kept from an earlier run


def iso_utc(when: datetime | str | float) -> str:
    """UTC ISO 8601 text for a datetime (naive = UTC), an ISO string or a Unix time."""
    if isinstance(when, str):
        when = datetime.fromisoformat(when)
    elif isinstance(when, int | float):
        when = datetime.fromtimestamp(when, UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat(timespec="milliseconds")


def used_params(samples: list[dict], final: dict, end_bytes: int) -> tuple[dict, float]:
    """The per-partition parameter set that moved the most bytes, and its share of the bytes."""
    moved: dict[str, int] = {}
    sets: dict[str, dict] = {}
    previous = 0
    for sample in samples:
        params = sample.get("params") or {}
        key = json.dumps(params, sort_keys=True)
        sets.setdefault(key, params)
        moved[key] = moved.get(key, 0) + max(0, sample["bytes"] - previous)
        previous = max(previous, sample["bytes"])
    if final:
        key = json.dumps(final, sort_keys=True)
        sets.setdefault(key, final)
        moved[key] = moved.get(key, 0) + max(0, end_bytes - previous)
    if not sets:
        return {}, 0.0
    best = max(moved, key=lambda k: moved[k])   # first-seen wins a tie
    total = sum(moved.values())
    return sets[best], (moved[best] / total if total else 1.0)


def combine(per_partition: dict[str, dict]) -> dict[str, int | None]:
    """cc summed over partitions; p and pp cc-weighted; cpu_num/cpu_freq where applied."""
    parts = list(per_partition.values())
    if not parts:
        return {"cc": None, "p": None, "pp": None, "cpu_num": None, "cpu_freq": None}
    cc = sum(int(x.get("cc") or 0) for x in parts)

    def weighted(name: str) -> int | None:
        values = [(int(x.get("cc") or 0), x.get(name)) for x in parts if x.get(name) is not None]
        if not values:
            return None
        weight = sum(w for w, _ in values)
        if weight == 0:
            return max(v for _, v in values)
        return max(1, round(sum(w * v for w, v in values) / weight))

    def applied(name: str) -> int | None:
        return next((x[name] for x in parts if x.get(name) is not None), None)

    return {"cc": cc, "p": weighted("p"), "pp": weighted("pp"),
            "cpu_num": applied("cpu_num"), "cpu_freq": applied("cpu_freq")}


def record_from_result(result: TransferResult, plan_info: dict) -> TransferRecord:
    """One history row for a finished transfer.

    ``plan_info`` keys, all optional (``dataclasses.asdict(plan)`` of a
    ``TransferRequest`` plus extras works; unknown keys are ignored):

    - ``sources`` (list of URLs; the first is recorded) or ``source``;
    - ``dataset_id``: a dataset id or label;
    - ``started_at``: datetime, ISO text or Unix time (default: now − duration);
    - ``rtt`` (s), ``bandwidth`` (bytes/s), ``tcp_buffer`` (bytes): what the user
      gave, used when the tuner gathered no network facts;
    - ``energy_j``, ``energy_kind`` ('measured' | 'estimated'), ``cpu_num``,
      ``cpu_freq`` (kHz): from the energy module; cpu_num/cpu_freq override
      the parameters' own values;
    - ``exit_status`` (default 0 if every file is verified, else 1);
    - ``origin`` (default 'dtune'), ``duration_s`` (default the accounting's
      elapsed time).
    """
    snap = result.snapshot
    tuning = result.tuning or {}
    samples = result.samples or []

    duration = plan_info.get("duration_s")
    if duration is None and snap is not None:
        duration = snap.elapsed
    moved = snap.bytes if snap is not None else (samples[-1]["bytes"] if samples else None)
    throughput = (moved * 8 / duration / 1e6) if moved is not None and duration else None

    sizes = [f.size for f in result.files if f.size is not None]
    file_count = len(result.files)
    total = sum(sizes) if sizes else None
    avg = total / len(sizes) if sizes else None

    facts = tuning.get("facts")
    how = (facts or {}).get("how") or {}
    if facts:
        rtt_ms, bandwidth, buffer = facts.get("rtt_ms"), facts.get("bandwidth_mbps"), facts.get("tcp_buffer")
        rtt_how, bandwidth_how, buffer_how = how.get("rtt"), how.get("bandwidth"), how.get("tcp_buffer")
    else:
        rtt_ms, rtt_how = _given(plan_info.get("rtt"), 1000)
        bandwidth, bandwidth_how = _given(plan_info.get("bandwidth"), 8 / 1e6)
        buffer, buffer_how = _given(plan_info.get("tcp_buffer"), 1)
        if rtt_ms is None and snap is not None and snap.rtt is not None:
            rtt_ms, rtt_how = round(snap.rtt * 1000, 3), "measured"   # median TCP connect time
    buffer = int(buffer) if buffer is not None else None

    final = tuning.get("final") or {}
    used, share = used_params(samples, final, moved or 0)
    theta = combine(used)
    for name in ("cpu_num", "cpu_freq"):
        if plan_info.get(name) is not None:
            theta[name] = plan_info[name]

    if plan_info.get("started_at") is not None:
        started = iso_utc(plan_info["started_at"])
    else:
        started = iso_utc(datetime.now(UTC) - timedelta(seconds=duration or 0))
    sources = plan_info.get("sources") or []
    source = plan_info.get("source") or (sources[0] if sources else None)
    failed = sum(1 for f in result.files if f.status == "failed")
    exit_status = plan_info.get("exit_status")
    if exit_status is None:
        exit_status = 0 if failed == 0 else 1

    return TransferRecord(
        started_at=started, source=source, dataset_id=plan_info.get("dataset_id"),
        avg_file_size=round(avg, 3) if avg is not None else None, file_count=file_count, total_bytes=total,
        rtt_ms=rtt_ms, rtt_how=rtt_how, tcp_buffer=buffer, tcp_buffer_how=buffer_how,
        bandwidth_mbps=bandwidth, bandwidth_how=bandwidth_how,
        cc=theta["cc"], p=theta["p"], pp=theta["pp"], cpu_num=theta["cpu_num"], cpu_freq=theta["cpu_freq"],
        params_json={"used": used, "used_share": round(share, 4), "initial": tuning.get("initial"),
                     "final": final or None, "files": tuning.get("partitions")},
        tuner=tuning.get("tuner"), tuner_settings=tuning.get("settings"),
        throughput_mbps=round(throughput, 3) if throughput is not None else None,
        duration_s=round(duration, 3) if duration is not None else None, bytes=moved,
        energy_j=plan_info.get("energy_j"), energy_kind=plan_info.get("energy_kind"),
        files_ok=sum(1 for f in result.files if f.status in DONE_STATUSES), files_failed=failed,
        retries=snap.retries if snap is not None else None, exit_status=exit_status,
        origin=plan_info.get("origin") or "dtune",
    )


def save_transfer(result: TransferResult, plan_info: dict, url: str | None = None) -> int:
    """Record a finished transfer and its samples in the history at ``url``; return the row id.

    Raises ``DtuneError`` (one line) if the database cannot be written; the
    caller decides whether that fails the transfer (``dtune get`` warns).
    """

    row = record_from_result(result, plan_info)
    path = sqlite_path(url)
    if path is not None:  # the default: no SQLAlchemy to import for one row
        return record(path, row, result.samples or [])
    from dtune.history.store import open_store  # (SQLAlchemy: only for a database other than SQLite)

    with open_store(url) as store:
        return store.record(row, result.samples or [])


def _given(value: float | None, factor: float) -> tuple[float | None, str | None]:
    if value is None:
        return None, None
    return round(value * factor, 3), "given"
