"""``dtune put``: local files and trees up to S3 and WebDAV, with a get's tuning and verification.

``local`` (the files) → ``start`` (destination, access) → ``run`` (the tuned
schedule, retries, verification) over ``dest`` (the interface) with ``s3dest``
and ``davdest``; ``wire`` sends request bodies on dtune's HTTP/1.1
connections; ``parts`` and ``s3xml`` are pure. ``docs/put.md`` describes it.
"""
