"""The benchmark's server check: ``listening`` sees a real socket on 127.0.0.1 in our namespace."""

from __future__ import annotations

import os
import socket

from dtune_lab.bench.servers import listening


def test_listening_sees_a_socket_in_our_own_namespace() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not listening(os.getpid(), port)
        s.listen()
        assert listening(os.getpid(), port)
