"""What a transfer returns: one ``FileResult`` per file and the final snapshot (plain data)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dtune.accounting import Snapshot


@dataclass(slots=True)
class FileResult:
    """What became of one file of a transfer."""
    relpath: str
    status: str           # done | skipped (in place, hashed) | kept (in place, unread) | failed;
                          # a dry run's: fetch | skip | resume | check
    size: int | None
    error: str | None = None
    checksum: str | None = None  # what verified a done/skipped file ("sha256 (SHA256SUMS)"); None: size only
                                 # (or kept: not verified)
    # replicas this file stopped using, in order: {replica, url (redacted), status, reason}
    dropped: list[dict] = field(default_factory=list)
    renewed: int = 0      # expired links renewed from the original URLs (``engine.files.Replica``)


@dataclass(slots=True)
class TransferResult:
    """What a transfer did: every file, the last snapshot, the tuning and the summary."""
    files: list[FileResult] = field(default_factory=list)
    snapshot: Snapshot | None = None
    # filled in by dtune.transfer: what was tuned how, and the per-second samples
    tuning: dict = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)
    energy: dict | None = None  # {"joules", "kind", "seconds", "watts", "note"} when metered
    dry_run: bool = False       # --dry-run: ``files`` says what would be done, nothing was
    nodes: dict | None = None   # a cluster transfer's bytes, rate and files per node (``dtune.cluster``)
    summary: dict = field(default_factory=dict)  # the last event (``transfer.events.summary_event``)

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed
