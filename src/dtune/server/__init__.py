"""``dtune serve``: a range-capable, pipelining HTTP/1.1 (and HTTPS) file server with the dtune manifest.

Modules, from the outside in:

* ``cli``        the ``serve`` sub-command (flags and help only)
* ``app``        ``FileServer`` (listening socket, counters, deadlines), ``run``
* ``thread``     ``ServerThread``: a ``FileServer`` on a background event loop (``LoopThread``)
* ``protocol``   ``HttpConnection``: in-order pipelined answers, small bodies inline
* ``send``       ``BodySender``: large bodies by sendfile (under TLS: pieces through the transport)
* ``request``    ``RequestReader``: httptools parsing and the request size limits (no I/O)
* ``context``    ``ServerContext`` / ``Connection``: what a connection and the server use of each other; ``Stats``
* ``places``     who is served when every place is taken: waiting connections, reclaiming unused places (pure)
* ``auth``       ``--token-file``: reading the token, the bearer check
* ``tls``        ``--tls-cert`` / ``--tls-key``: the TLS server context, or one error naming flag and file
* ``config``     ``ServerConfig``: every tunable with its default and the reason for it
* ``paths``      request path → file inside the served directory (traversal and symlink checks)
* ``conditions`` Range / If-Range / If-None-Match / If-Modified-Since decisions (pure)
* ``manifest``   the dtune manifest and the SHA-256 cache
* ``listing``    nginx-style HTML listing
* ``writer``     ``UploadHandler`` (``--writable``): upload heads judged before their body, answers after
* ``uploads``    ``UploadStore``: part files, journals of pieces, quota, digests, completion
* ``confine``    where an upload may land: parents opened one by one and checked, the rename
* ``uploadhead`` Content-Range / Repr-Digest / Content-MD5 parsing and received ranges (pure)
"""

from dtune.server.app import FileServer, run
from dtune.server.config import ServerConfig
from dtune.server.thread import ServerThread

__all__ = ["FileServer", "ServerConfig", "ServerThread", "run"]
