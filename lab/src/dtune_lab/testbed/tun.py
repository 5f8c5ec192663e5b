"""Open a layer-3 TUN device (IFF_TUN | IFF_NO_PI) and return its file descriptor.

The device lives as long as some process holds the descriptor: moving it to
another network namespace (``ip link set DEV netns NS``) keeps the
descriptor valid, and closing the last copy destroys the device wherever it
is. That is what makes the emulator's links leave nothing behind.
"""

from __future__ import annotations

import fcntl
import os
import struct

from dtune.errors import DtuneError

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFNAMSIZ = 16


def open_tun(name: str) -> int:
    """Create TUN device ``name`` in the current namespace; the fd is non-blocking."""
    if not 0 < len(name) < IFNAMSIZ:
        raise DtuneError(f"tun {name}: interface names are 1 to 15 characters")
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise DtuneError(f"tun {name}: cannot open /dev/net/tun: {exc.strerror}") from None
    try:
        ifr = struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI)
        fcntl.ioctl(fd, TUNSETIFF, ifr)
    except OSError as exc:
        os.close(fd)
        raise DtuneError(f"tun {name}: TUNSETIFF failed: {exc.strerror}") from None
    return fd
