"""A server on its own event loop in a background thread, for tests and in-process commands.

``LoopThread`` is the machinery any such server needs: a daemon thread that
runs ``serve(stop)`` on a private loop, a start that waits until the server
says it is ready (or failed), and a stop that can be called from any thread.
``ServerThread`` is ``dtune serve``'s ``FileServer`` on it (the tests use it;
``dtune demo`` and the bench start ``dtune serve`` as a process instead,
``dtune_lab.serveproc``); a test double speaking HTTP can be one too.

``serve`` sets up, calls ``self.ready()``, awaits ``stop.wait()`` and then
tears down. ``start`` waits at most 10 s for ``ready``: a server that binds
to loopback is listening in milliseconds, and a hung start must not hang a
test run. Whatever ``serve`` raises before ``ready`` is raised again in the
thread that called ``start``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Self

from dtune.errors import DtuneError
from dtune.server.app import FileServer, loop_factory
from dtune.server.config import ServerConfig

START_TIMEOUT = 10.0  # seconds; see the module docstring


class LoopThread:
    """Run ``serve`` on a private event loop in a daemon thread named ``name``; a context manager."""

    def __init__(self, name: str) -> None:
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop] | None:
        """The event loop to run on (called in the new thread); None is asyncio's default."""
        return None

    async def serve(self, stop: asyncio.Event) -> None:
        """Set up, call ``self.ready()``, wait for ``stop``, tear down."""
        raise NotImplementedError

    def ready(self) -> None:
        """Called by ``serve`` once the server takes connections: ``start`` returns."""
        self._ready.set()

    def _main(self) -> None:
        factory = self.loop_factory()
        try:
            with asyncio.Runner(loop_factory=factory) as runner:
                runner.run(self._run())
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._ready.set()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await self.serve(self._stop)

    def start(self) -> Self:
        """Start the thread and wait until ``serve`` is ready; raise what it raised on the way."""
        self._thread.start()
        self._ready.wait(START_TIMEOUT)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        """Ask ``serve`` to stop and wait for the thread (10 s at most)."""
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed while we looked
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(START_TIMEOUT)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerThread(LoopThread):
    """A ``FileServer`` on its own event loop in a daemon thread; use as a context manager.

    >>> with ServerThread(ServerConfig(root=path, port=0, quiet=True)) as srv:
    ...     urllib.request.urlopen(srv.url + "a.bin")
    """

    def __init__(self, config: ServerConfig) -> None:
        super().__init__("dtune-serve")
        self.config = config
        self.server: FileServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop] | None:
        return loop_factory(self.config.loop)

    async def serve(self, stop: asyncio.Event) -> None:
        self.server = FileServer(self.config)
        asyncio.get_running_loop().set_exception_handler(self.server.loop_exception)
        await self.server.start()
        self.ready()
        try:
            await stop.wait()
        finally:
            await self.server.close()

    def start(self) -> Self:
        super().start()
        if self.server is None or not self.server.port:
            raise DtuneError("serve: server thread did not start")
        return self
