"""What the tests share, imported as ``support.…`` (``tests`` is on ``sys.path``: see pyproject.toml).

* ``fakeserver``   the scripted servers: ``FakeServer`` (in memory or on
                   127.0.0.1) and ``HostileServer``, on one core;
* ``realservers``  real servers as child processes: nginx, ``dtune serve``;
* ``rawhttp``      a raw HTTP/1.1 client for exact bytes on the wire;
* ``harness``      ``dtune get`` as a user runs it, and verdicts on what it left;
* ``engine``       the transfer engine run against a ``FakeServer``, and its checks;
* ``recorder``     an exchange that records what an ``http.connection.Connection`` told it;
* ``paths``        where the repository, the scenarios and the captured listings are;
* ``urls``         the check that a URL built from a name keeps the whole name in its path;
* ``marks``        the marks of tests that need root and network namespaces.
"""
