"""``dtune bench``: dtune against aria2c, curl, wget, lftp and rclone on the emulated WAN.

Rooms:

- ``config``   the ``[bench]``, ``[[profile]]``, ``[[dataset]]`` and ``[[tool]]`` tables of a scenario
- ``urls``     URL lists and output-layout mapping (pure)
- ``peers``    one adapter per tool: its command line and where it puts files (pure)
- ``servers``  dtune serve / nginx inside the server namespaces, with request and byte counters
- ``verify``   size + SHA-256 of every output file against the source tree
- ``runner``   brings everything up, runs the interleaved repetitions, tears everything down
- ``report``   medians, ratio tables, results.csv / results.json / summary.md, plots
- ``cli``      the ``bench`` sub-command
"""
