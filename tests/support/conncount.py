"""``Held(port)``: the most TCP connections a client holds to ``127.0.0.1:port`` at once.

Counted at the client's end, from Linux's ``/proc/net/tcp`` every 2 ms (the
server's end can stay ESTABLISHED a moment after the client closed, and would
over-count). Linux only: callers skip where ``/proc/net/tcp`` is missing.
"""

from __future__ import annotations

import threading
import time


class Held:
    def __init__(self, port: int) -> None:
        self.key = f"0100007F:{port:04X}"
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def count(self) -> int:
        ends = set()   # (distinct: a table read while it changes may repeat a line)
        with open("/proc/net/tcp") as table:
            next(table)
            for line in table:
                fields = line.split()
                if fields[2] == self.key and fields[3] in ("01", "02"):   # ESTABLISHED, SYN_SENT
                    ends.add(fields[1])
        return len(ends)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, self.count())
            time.sleep(0.002)

    def __enter__(self) -> Held:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
