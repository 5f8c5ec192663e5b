"""HTTP/1.1 client layer: URL → origin, request bytes, a pipelining connection.

Layers, bottom up:
  ``message``  sans-IO: request bytes, Content-Range/Retry-After parsing
  ``connection`` one asyncio connection with a pipeline of exchanges, parsed by httptools
  ``client``   ``Fetcher.fetch()`` for small documents (listings, HEAD) with redirects
The engine drives ``connection`` directly; nothing here writes files.
"""
