"""The options only ``dtune put`` has (the others are the get's, from ``dtune.options``)."""

from __future__ import annotations

from dtune import argtypes
from dtune.config import Option

GROUP = "put"
GROUP_TITLE = "uploads (dtune put)"

PUT_OPTIONS: list[Option] = [
    Option(("--part-size",), "S3 and dtune serve: the size of each part (piece) of an upload in parts, e.g. 32M (default: tuned, "
           "8 to 64 MiB, at least 2 parts per part in flight; raised to what 10,000 parts need). Files up to "
           "16 MiB (or up to this size) go in one PUT", GROUP, parse=argtypes.size, metavar="BYTES"),
    Option(("--sync",), "put only files that differ: a file the destination holds with the same size and "
           "mtime (S3: the x-amz-meta-mtime dtune and rclone store, to the second; WebDAV: a copy modified "
           "at or after the local file) is skipped", GROUP, kind="flag"),
    Option(("--verify-read",), "WebDAV: read back every file whose server publishes no digest and compare "
           "its SHA-256 (default: such files are checked on size only, and say so)", GROUP, kind="flag"),
    Option(("--no-resume",), "S3 and dtune serve: start every upload in parts afresh instead of resuming "
           "the incomplete upload an interrupted run left for the same key or path", GROUP, kind="flag"),
    Option(("--content-md5",), "S3: hash the parts of a multipart upload with MD5 (Content-MD5, verified by "
           "ETags) even where the server takes CRC32 flexible checksums (default: CRC32 where it does, "
           "a third of MD5's CPU; MD5 where it does not)", GROUP, kind="flag"),
]
