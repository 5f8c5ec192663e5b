"""HTTP/1.1 client layer: URL → origin, request bytes, a pipelining connection.

Layers, bottom up:
  ``message``  sans-IO: request bytes, Content-Range/Retry-After parsing
  ``connection`` one asyncio connection with a pipeline of exchanges, parsed by httptools
  ``cookies``  the transfer's one cookie jar (RFC 6265) and the Netscape cookie file
  ``client``   ``Fetcher.fetch()`` for small documents (listings, HEAD) with redirects;
               ``sign_in``: one login walk per data origin, the other requests wait for it
The engine drives ``connection`` directly; nothing here writes files.
"""
