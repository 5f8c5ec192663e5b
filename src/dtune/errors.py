"""dtune's own exceptions. Third-party errors become one of these at the boundary.

Every message starts with the operation and names the file, e.g.
``range 3 of big.bin: server sent 200 to a Range request``.
"""

from __future__ import annotations

import signal


class DtuneError(Exception):
    """Base class: a failure dtune reports as one line, never a traceback."""


class UsageError(DtuneError):
    """Bad command-line input (exit code 2)."""


class UnsafePathError(DtuneError):
    """A name from an untrusted listing would land outside the output directory."""


class DiscoveryError(DtuneError):
    """A source could not be listed (bad listing, unreachable, unsupported). ``retryable``: asking
    again may help (a timeout, a reset, 5xx, 429). ``status``: the HTTP status that refused the
    listing, when one did."""

    def __init__(self, message: str, *, retryable: bool = False, retry_after: float | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status


class SourceError(DiscoveryError, UsageError):
    """A source or mirror as given is none (no such local file, a local directory, not an http(s)
    URL): a usage error (exit 2), raised where discovery looks at it."""


class HTTPError(DtuneError):
    """An HTTP exchange failed. ``retryable`` says whether trying again may help."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = True,
                 retry_after: float | None = None, innocent: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        # innocent: the request was never answered because of another request's
        # fate on the same connection; retrying it costs the file nothing
        self.innocent = innocent


class ProtocolError(HTTPError):
    """The peer broke HTTP/1.1 (garbage status line, bad framing, mismatched Content-Range)."""


class RangeCut(HTTPError):
    """A request reached the earlier end it was cut to (the rest went to a faster
    connection); its connection is dropped, which is nobody's fault."""


class DiskError(DtuneError):
    """Writing the output failed (no space, read-only, I/O error)."""


class Stopped(Exception):
    """A stop signal (SIGTERM, SIGHUP) ended the run the way Ctrl-C does: work in flight was
    journalled. Not a DtuneError: like KeyboardInterrupt it is how the run ended, not a failure."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")
