"""From a put's resolved option values to a running ``upload.run.Put``, and its history row.

``destination`` picks the module by DEST's scheme (``s3://`` → ``s3dest``;
``dav://``, ``davs://``, ``http(s)://`` → ``davdest``); ``http(s)://`` whose
server answers ``Server: dtune/…`` (``servedest.recognise``, one ``HEAD`` of
DEST) → ``servedest``. One more kind of destination is one more branch here
and one module. Credentials go only into
the ``Access`` (``transfer.request.access_from``: userinfo taken out of the
URL, ``--header`` / ``--netrc`` / tokens scoped to the destination's origin,
SigV4 for the S3 endpoint's origin): no message, event or history row
carries them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from dtune.errors import DtuneError, UsageError
from dtune.history.row import TransferRecord
from dtune.http.redact import shown_url
from dtune.loop import stop_status
from dtune.netprobe import measure_rtt
from dtune.transfer.request import access_from
from dtune.upload.dest import Destination
from dtune.upload.local import collect
from dtune.upload.run import Put, PutResult, pacer, run, selection
from dtune.upload.wire import Sender

DEST_SCHEMES = ("s3://", "dav://", "davs://", "http://", "https://")



def destination(dest: str, values: Mapping[str, Any], emit: Callable[[dict], None],
                environ: Mapping[str, str] | None = None) -> tuple[Destination, Sender, str]:
    """The destination for DEST, its sender, and a URL on its origin (for the RTT)."""
    env = os.environ if environ is None else environ
    lower = dest.lower()
    if not lower.startswith(DEST_SCHEMES):
        raise UsageError(f"{shown_url(dest)}: DEST must be s3://BUCKET/PREFIX/ or a WebDAV collection "
                         f"(dav://, davs://, http://, https://) or a dtune serve --writable directory (http(s)://)")
    def make_sender(access) -> Sender:
        return Sender(access, connect_timeout=float(values.get("connect_timeout") or 10),
                      stall_timeout=float(values.get("stall_timeout") or 30),
                      answer_timeout=max(60.0, float(values.get("header_timeout") or 30)),
                      pacer=pacer(dict(values)))

    if lower.startswith("s3://"):
        from dtune.discovery.s3 import s3_settings  # (S3 only: xml, SigV4)
        from dtune.upload.s3dest import S3Destination  # (S3 only)
        settings, creds = s3_settings(values, env)
        access, _, _ = access_from(values, [settings.endpoint + "/"], [], env, s3=(settings, creds))
        sender = make_sender(access)
        out: Destination = S3Destination(dest, settings, sender, signed=creds is not None,
                                          flexible=not values.get("content_md5"))
        probe = settings.endpoint + "/"
    else:
        from dtune.discovery.urls import from_dav  # (WebDAV only)
        from dtune.upload.davdest import DavDestination  # (WebDAV only)
        plain = from_dav(dest) or dest
        access, cleaned, _ = access_from(values, [plain], [], env)
        sender = make_sender(access)
        out = DavDestination(cleaned[0], sender, verify_read=bool(values.get("verify_read")))
        probe = cleaned[0]
    for warning in access.warnings:
        emit({"event": "warning", "message": warning})
    return out, sender, probe


async def served(target: Destination, dest: str, sender: Sender) -> Destination:
    """``target``, or a ``ServeDestination`` when DEST is ``http(s)://`` and its server is ``dtune serve``."""
    from dtune.upload.davdest import DavDestination  # (http(s):// only)
    if not dest.lower().startswith(("http://", "https://")) or not isinstance(target, DavDestination):
        return target
    from dtune.upload.servedest import ServeDestination, recognise  # (http(s):// only)
    if await recognise(sender, target.base):   # (the base has no credentials: taken out of the URL)
        return ServeDestination(target.base, sender)
    return target


async def put(sources: list[str], dest: str, values: dict[str, Any], emit: Callable[[dict], None],
              environ: Mapping[str, str] | None = None) -> PutResult:
    """The whole put: collect, tune, send, verify; its history row written unless --no-history."""
    found = collect(sources, selection(values))
    for warning in found.warnings:
        emit({"event": "warning", "message": warning})
    target, sender, probe = destination(dest, values, emit, environ)
    if not values.get("dry_run") and found.files:
        target = await served(target, dest, sender)
    started = datetime.now(UTC)
    job = Put(target, sender, values, emit)
    sender.on_bytes = lambda n: setattr(job.result, "sent", job.result.sent + n)
    rtt = None
    if not values.get("rtt") and not values.get("dry_run") and found.files:
        try:
            rtt = await measure_rtt(probe, access=sender.access)
        except DtuneError:
            rtt = None
    status = 1
    try:
        result = await run(job, found.files, sync=bool(values.get("sync")), dry_run=bool(values.get("dry_run")),
                           rtt=rtt)
        status = 0 if result.ok else 1
        return result
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = stop_status()   # 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP: as the process exits
        raise
    finally:
        target.close()
        if not values.get("no_history") and not values.get("dry_run") and found.files:
            try:
                record(job.result, target.label, started, status, values)
            except DtuneError as exc:
                emit({"event": "warning", "message": f"history not written: {exc}"})


def history_row(result: PutResult, dest: str, started: datetime, status: int) -> TransferRecord:
    """The history's row for a put (``direction = 'put'``; ``dest``: the destination's label, which
    holds no credential, shown once more as ``shown`` does)."""
    sizes = [f.size for f in result.files]
    tuning = result.tuning or {}
    params = tuning.get("params") or {}
    facts = tuning.get("facts") or {}
    how = facts.get("how") or {}
    cc = sum(p["cc"] for p in params.values()) or None
    p = max((p["p"] for p in params.values()), default=None)
    return TransferRecord(
        started_at=started.isoformat(timespec="seconds"), source=shown_url(dest),
        avg_file_size=(sum(sizes) / len(sizes)) if sizes else None, file_count=len(sizes), total_bytes=sum(sizes),
        rtt_ms=facts.get("rtt_ms"), rtt_how=how.get("rtt"), tcp_buffer=facts.get("tcp_buffer"),
        tcp_buffer_how=how.get("tcp_buffer"), bandwidth_mbps=facts.get("bandwidth_mbps"),
        bandwidth_how=how.get("bandwidth"), cc=cc, p=p, pp=1 if cc else None,
        params_json={"used": params} if params else None, tuner=tuning.get("tuner"),
        tuner_settings=tuning.get("settings"),
        throughput_mbps=round(result.sent * 8 / 1e6 / result.seconds, 3) if result.seconds > 0 else None,
        duration_s=round(result.seconds, 3), bytes=result.sent,
        files_ok=sum(1 for f in result.files if f.status in ("done", "skipped")),
        files_failed=sum(1 for f in result.files if f.status == "failed"), retries=result.retries,
        exit_status=status, direction="put")


def record(result: PutResult, dest: str, started: datetime, status: int, values: Mapping[str, Any]) -> int:
    from dtune.history.lite import record as lite_record  # (at the end: sqlite3 only then)
    from dtune.history.lite import sqlite_path  # (as above)

    row = history_row(result, dest, started, status)
    url = values.get("history")
    path = sqlite_path(url)
    if path is not None:
        return lite_record(path, row)
    from dtune.history.store import open_store  # (SQLAlchemy: only for a database other than SQLite)
    with open_store(url) as store:
        return store.record(row)
