"""``dtune bench``: dtune against aria2c, curl, wget, lftp and rclone on the emulated WAN.

Also the library of the experiments around it: the history sweep, and what
the hand-run scripts in ``benchmarks/`` import (nginx, verification).

Rooms:

- ``config``   the ``[bench]``, ``[[profile]]``, ``[[dataset]]`` and ``[[tool]]`` tables of a scenario
- ``urls``     URL lists and output-layout mapping (pure)
- ``peers``    one adapter per tool: its command line and where it puts files (pure)
- ``nginx``    the one nginx configuration (benchmarks, tests, listing captures); nginx on loopback
- ``servers``  dtune serve / nginx inside the server namespaces, with request and byte counters
- ``verify``   size + SHA-256 of every output file against the source tree
- ``client``   one client run in the client namespace (wall and CPU seconds), what its log says
- ``during``   mid-run link changes: when each is due (pure), and the thread that applies them
- ``runner``   brings everything up, runs the interleaved repetitions, tears everything down
- ``report``   medians, ratio tables, results.csv / results.json / summary.md, plots
- ``cli``      the ``bench`` sub-command (entry point ``dtune.commands``)
- ``sweep``    ``dtune history sweep``: fixed θ on the testbed, rows appended to the history
- ``sweep_cli`` the ``history sweep`` action (entry point ``dtune.history_commands``)
"""

from collections.abc import Callable

# Where the benchmark and the sweep say what they are doing, one line at a time
# (print, or a test's list.append).
Echo = Callable[[str], None]
