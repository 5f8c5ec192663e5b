"""Every tunable of ``dtune serve``, declared once with its default and the reason for it.

The CLI builds its flags from the fields marked as options; tests and the
in-process ``ServerThread`` pass a ``ServerConfig`` directly (e.g. with
sub-second timeouts).

Defaults next to what nginx 1.22 and Apache 2.4 use:

=====================  ==========  ===========================================  ==============================
limit                  dtune       nginx                                        Apache httpd
=====================  ==========  ===========================================  ==============================
request target         8 KiB       ``large_client_header_buffers 4 8k``         ``LimitRequestLine 8190``
                                   (request line must fit one 8 KiB buffer)
all header fields      32 KiB      4 × 8 KiB buffers                            ``LimitRequestFieldSize 8190``
                                                                                 per field
header field count     100         (no count; bounded by the buffers)           ``LimitRequestFields 100``
request head time      20 s        ``client_header_timeout 60s``                ``RequestReadTimeout header=20-40``
idle keep-alive        30 s        ``keepalive_timeout 75s``                    ``KeepAliveTimeout 5``
send stall             60 s        ``send_timeout 60s``                         ``Timeout 60``
request body           64 KiB      ``client_max_body_size 1m``                  ``LimitRequestBody`` (1 GiB)
connections            512         ``worker_connections 512``                   ``MaxRequestWorkers 400`` (event)
waiting for a place    512         —                                            —
place reclaimed after  1 s         at once, from connections that have sent    —
                                   no request byte (when < 1/16 are free)
listen backlog         511         ``listen … backlog=511``                     ``ListenBacklog 511``
TLS handshake          20 s        ``client_header_timeout 60s``                ``RequestReadTimeout handshake=0``
                                   (covers the handshake)                       (none)
TLS close_notify wait  5 s         —                                            —
upload (--writable)    64 GiB      ``client_max_body_size 1m``                  ``LimitRequestBody`` (1 GiB)
upload quota           1 TiB       —                                            —
=====================  ==========  ===========================================  ==============================

Why these values: 8 KiB / 32 KiB / 100 follow the two big servers, so a
request either accepts everywhere or nowhere. The head deadline is Apache's
20 s: a slowloris client trickling one header byte at a time is cut off
after 20 s however busy it keeps the socket. The idle keep-alive is between
Apache's 5 s (too short for a tuner that pauses between partitions) and
nginx's 75 s (holds descriptors of crashed clients longer than needed).
Bodies of requests other than uploads are discarded (only GET and HEAD
are served; upload bodies go to disk, bounded by ``max_upload_size``), so
64 KiB is plenty.
512 connections covers dtune's largest cc × p with room for several clients.

When all 512 places are taken, a new connection is not refused at once: it
waits (as many again, at least one listen backlog's worth; the one waiting
longest is dropped for a newcomer) until its first request head is
complete, then takes a free place or the place of the served connection
that has gone longest without a request in progress, if that one has gone
at least ``reclaim_after`` (1 s); else it is answered 503. A client sends
its next request within a round trip of connecting or of its last answer,
so a place unused for a second is held, not used; a shorter time would let
a burst of new connections close connections about to be used, instead of
being answered 503 with ``Retry-After``. Connections that never finish a
head (slowloris) thus never take a place from anyone, and the places they
hold go to the first real requests (``places.py``, ``docs/server.md``).

Uploads (``--writable``): one request, and the file a pieced upload
builds, may hold at most ``max_upload_size`` (64 GiB): large enough for
most single data files (raise it for bigger ones), small enough that a
mistaken or hostile length is refused (413) before a byte is written.
``upload_quota`` (1 TiB) bounds what the token may upload in one run of the
server (507 beyond): a leaked token can fill no more than that. The free
space of the disk is checked at every head too (507).

The TLS handshake is the beginning of the first request head and gets the
head's 20 s. At close, asyncio waits 30 s by default for the client's
``close_notify``; 5 s is plenty for a client that answers at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Settings of one ``dtune serve`` instance (see the module table for the reasons)."""

    root: Path
    host: str = "127.0.0.1"
    port: int = 8080
    checksums: bool = False
    max_connections: int = 512
    quiet: bool = False
    loop: str = "auto"  # "auto" (uvloop when importable), "uvloop" or "asyncio"
    # HTTPS: the certificate chain (PEM) and its private key (PEM; None: in the certificate file)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # bearer tokens: the file holding the one token every request must carry
    token_file: Path | None = None
    # uploads (``--writable``, needs a token file): PUT, Content-Range pieces, DELETE ?upload
    writable: bool = False
    max_upload_size: int = 64 << 30
    upload_quota: int = 1 << 40

    max_request_line: int = 8 * 1024
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    header_timeout: float = 20.0
    keepalive_timeout: float = 30.0
    send_timeout: float = 60.0
    max_body: int = 64 * 1024
    backlog: int = 511
    # When full, connections wait for a place (``max_waiting``); this is how long a served one must
    # have gone without a request in progress before a waiting one's request may take its place.
    reclaim_after: float = 1.0
    tls_handshake_timeout: float = 20.0
    tls_shutdown_timeout: float = 5.0
    # TLS bodies cannot use sendfile: they are read and written in pieces of this size, each
    # after the transport has taken the one before (flow control). Measured with curl (2 loops,
    # 3 rounds): 64 KiB pieces slower in 3 of 4 medians, 1 MiB no faster than 256 KiB within the
    # noise, at 4× the memory per connection.
    tls_piece: int = 256 * 1024
    # Requests parsed but not answered yet, per connection, before reading pauses.
    max_pipeline: int = 128
    # Bodies up to this size are read into memory and written together with the
    # head (many small pipelined answers leave in one write); larger ones use sendfile.
    inline_body_max: int = 64 * 1024
    # Answers of one batch leave in one write, but no more than this much at once,
    # so the client receives (and sends its next requests) while the rest is produced.
    flush_bytes: int = 64 * 1024
    cache_dir: Path | None = None  # checksum cache; None = $XDG_CACHE_HOME/dtune

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first setting that cannot work."""
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is not in 0..65535")
        if self.max_connections < 1:
            raise ValueError("max-connections must be at least 1")
        for name in ("header_timeout", "keepalive_timeout", "send_timeout", "tls_handshake_timeout",
                     "tls_shutdown_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.reclaim_after < 0:
            raise ValueError("reclaim_after must not be negative")
        if self.tls_piece < 1:
            raise ValueError("tls_piece must be at least 1")
        if self.tls_key is not None and self.tls_cert is None:
            raise ValueError("a TLS key needs a certificate (--tls-cert)")
        if self.writable and self.token_file is None:
            raise ValueError("--writable needs --token-file: uploads are accepted only with a bearer token")
        if self.max_upload_size < 0 or self.upload_quota < 0:
            raise ValueError("upload limits must not be negative")
        if self.loop not in ("auto", "uvloop", "asyncio"):
            raise ValueError(f"unknown event loop {self.loop!r}")

    @property
    def max_waiting(self) -> int:
        """Connections that may wait for a place: as many as are served, and at least one listen backlog
        (one accept burst, up to ``backlog`` connections, then cannot push a connection accepted in it
        out of the waiting room before its first bytes are read)."""
        return max(self.max_connections, self.backlog)

    @property
    def root_str(self) -> str:
        return os.fspath(self.root)
