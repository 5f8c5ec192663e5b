"""The marks every test that builds network namespaces carries: skip cleanly without root, ip or TUN."""

from __future__ import annotations

import os
import shutil

import pytest

NETNS = [
    pytest.mark.netns,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="needs root to create network namespaces"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2's ip command"),
    pytest.mark.skipif(not os.path.exists("/dev/net/tun"), reason="needs /dev/net/tun"),
]
NEEDS_CURL = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
