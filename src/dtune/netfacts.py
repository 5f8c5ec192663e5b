"""Network facts the tuners need — RTT, bandwidth, TCP buffer — as plain data.

Each fact records how it was obtained ("given" by the user, "measured",
or "assumed" when neither was possible), and that record goes into the
events and the transfer history. ``dtune.netprobe`` measures them; this
module only holds them, so that tuners can read facts without importing
any network code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ASSUMED_BANDWIDTH = 125_000_000   # 1 Gbit/s in bytes/s, when nothing better is known
ASSUMED_RTT = 0.010
ASSUMED_BUFFER = 6 * 1024 * 1024  # Linux's default tcp_rmem max


@dataclass(slots=True)
class NetworkFacts:
    """What is known of the path: round trip, bandwidth, buffers, and how each was found."""
    rtt: float                    # seconds
    bandwidth: float              # bytes/s
    tcp_buffer: int               # bytes (max receive window)
    how: dict[str, str] = field(default_factory=dict)
    replica_origins: list[str] = field(default_factory=list)  # multi-source: origin per replica
    replica_rtt: list[float] = field(default_factory=list)    # seconds per replica

    @property
    def bdp(self) -> float:
        return self.bandwidth * self.rtt

    def as_dict(self) -> dict:
        out = {"rtt_ms": round(self.rtt * 1000, 3), "bandwidth_mbps": round(self.bandwidth * 8 / 1e6, 3),
               "tcp_buffer": self.tcp_buffer, "bdp": round(self.bdp), "how": dict(self.how)}
        if len(self.replica_origins) > 1:
            out["replicas"] = [{"origin": o, "rtt_ms": round(r * 1000, 3)}
                               for o, r in zip(self.replica_origins, self.replica_rtt, strict=False)]
        return out


def os_receive_buffer_max() -> int | None:
    """The kernel's TCP receive buffer ceiling (third value of tcp_rmem)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_rmem") as fh:
            return int(fh.read().split()[2])
    except (OSError, ValueError, IndexError):
        return None
