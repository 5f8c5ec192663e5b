"""The tuning plan of a transfer: which tuner, the network facts it needs, its first θ.

Pure decisions live in ``dtune.tuners``; this room gathers what they need (RTT,
bandwidth, the user's fixed values) and says what was chosen in a ``tuning`` event.
"""

from __future__ import annotations

from dtune.http.message import split_url
from dtune.netfacts import NetworkFacts
from dtune.netprobe import RTT_SAMPLES, gather_facts
from dtune.stats import median
from dtune.transfer.events import EventSink
from dtune.transfer.request import TransferRequest
from dtune.tuners import Tuner, TunerPlan, make_tuner
from dtune.tuners.online_constants import constants_for
from dtune.tuners.online_tuner import OnlineTuner
from dtune.tuners.registry import online_default


async def plan_tuning(request: TransferRequest, specs: list, emit: EventSink, *,
                      connect_times: dict | None = None,
                      early: dict | None = None) -> tuple[Tuner, TunerPlan, NetworkFacts | None]:
    """Pick the tuner, gather the network facts it needs, and get its first plan.

    ``connect_times`` (origin → seconds) are the discovery's own connections:
    the RTT is taken from them rather than from new ones. ``early`` (origin →
    task) holds the mirrors' RTTs, measured while discovery ran.
    """
    replicas = max(1 + len(s.mirrors) for s in specs)
    search = online_default(request.tuner) if request.online is None else request.online
    limited = search and request.options.limit_rate > 0
    if limited:  # the limit is the bottleneck: the goodput says nothing about the connections
        search = False
    base = make_tuner(request.tuner, fixed=request.fixed(), max_cc=request.max_cc,
                      max_partitions=request.partitions, replicas=replicas, files=len(specs),
                      sla=request.sla, min_throughput=request.min_throughput_mbps, max_energy=request.max_energy_j,
                      model=request.model, online=search)
    tuner = OnlineTuner(base, search=search, cap=request.max_per_host, fixed=request.fixed(),
                        constants=constants_for(request.sla),
                        min_rate=(request.min_throughput_mbps or 0.0) * 1e6 / 8)
    sizes = [s.size if s.size is not None else s.size_hint for s in specs]  # (a rounded hint plans too)
    facts = NetworkFacts(rtt=request.rtt or 0.0, bandwidth=request.bandwidth or 0.0,
                         tcp_buffer=request.tcp_buffer or 0, how={})
    if tuner.needs_facts:
        largest = max(specs, key=lambda s: s.size or s.size_hint or 0)
        seen = (connect_times or {}).get(split_url(largest.url)[0])
        facts = await gather_facts(largest.url, bandwidth=request.bandwidth, tcp_buffer=request.tcp_buffer,
                                   rtt=request.rtt, seen_rtt=median(seen) if seen else None,
                                   mirrors=largest.mirrors, early=early, access=request.access,
                                   samples=rtt_samples(request))
    tplan = tuner.plan(sizes, facts)
    if limited:
        tplan.notes.append(f"online search off: --limit-rate {request.options.limit_rate} B/s is the "
                           f"bottleneck, the tuner's θ is kept")
    emit({"event": "tuning", "tuner": tuner.label, "settings": tuner.get_params(),
          "facts": facts.as_dict() if tuner.needs_facts else None,
          "params": {n: p.as_dict() for n, p in tplan.params.items()},
          "fixed": request.fixed().as_dict(), "reason": tplan.notes})
    return tuner, tplan, (facts if tuner.needs_facts else None)


def rtt_samples(request: TransferRequest) -> int:
    """Connects the RTT probe opens at once to one origin: within ``--max-connections-per-host``."""
    return max(1, min(RTT_SAMPLES, request.max_per_host))


def per_origin_gate(request: TransferRequest, replicas: int) -> int:
    """The most connections the engine opens to one origin: ``--max-connections-per-host``, or more
    when the user's own ``--cc`` and ``-p`` ask for more (fixed values are kept; a fixed p is
    spread over the replicas, each an origin of its own)."""
    if request.cc is None and request.p is None:
        return request.max_per_host
    fixed = (request.cc or 1) * -(-(request.p or 1) // max(1, replicas))
    return max(request.max_per_host, fixed)
