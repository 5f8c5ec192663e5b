"""The scripted HTTP/1.1 servers of the tests, on one core (``core.Server``).

* ``core``     the connection loop, the request record (``Request``: conn
               numbers, arrival times, ``sent`` bytes), start/stop on
               127.0.0.1 in a thread of its own or in memory on a
               ``MemoryNetwork``, pacing, lingering close;
* ``rules``    ``FakeServer``: well-behaved files whose paths misbehave as a
               sloppy server does (``Rule``), in memory or on a socket;
* ``expiring`` ``ExpiringLinks``: an archive redirecting each file to a signed link
               that expires after a few requests (presigned S3, CloudFront);
* ``dav``      ``DavServer``: a WebDAV door shaped like dCache's (PROPFIND with its
               Checksums property, Digest answers to Want-Digest), hostile listings on demand;
* ``hostile``  ``HostileServer``: per-path behaviours of broken and hostile
               servers (garbage, lying framing, silence, drips), on a socket.
"""

from .core import Request, Server, etag, parse_range, spans_overlap
from .dav import DavServer
from .expiring import ExpiringLinks
from .hostile import HostileServer
from .rules import FakeServer, Rule

__all__ = ["DavServer", "ExpiringLinks", "FakeServer", "HostileServer", "Request", "Rule", "Server", "etag", "parse_range", "spans_overlap"]
