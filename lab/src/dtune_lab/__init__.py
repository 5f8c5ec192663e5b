"""dtune's lab: the emulated WAN testbed, the benchmark against other tools, the demo.

A package of its own above the tool: it imports ``dtune``, ``dtune`` never
imports it. Its commands (``dtune demo``, ``dtune bench``, ``dtune testbed``,
``dtune dataset``, ``dtune history sweep``) reach the ``dtune`` program through
the entry-point groups ``dtune.commands`` and ``dtune.history_commands``
(``dtune.plugins``), declared in ``lab/pyproject.toml``.

Rooms: ``testbed`` (namespaces, TUN devices, the userspace link emulator,
datasets), ``bench`` (peers, runner, reports, the sweep, nginx, verification),
``demo``, and the small helpers only the lab uses: ``serveproc`` (starting
``dtune serve`` and reading its banner), ``procgroup`` (stopping a child's
process group), ``tomlfile`` (one TOML reader and value checks).
"""

__version__ = "0.1.0"
