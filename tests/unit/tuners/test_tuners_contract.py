"""Every tuner in the registry keeps one contract (as scikit-learn's common estimator checks).

For each registered name, on one source and on three replicas:

- ``get_params()`` names the tuner and holds every constructor argument and
  every field of its constants, and survives a JSON round trip;
- ``plan()`` honours the user's ``Fixed`` values, and so does every
  ``update()`` over two simulated minutes of snapshots whose partitions move
  at different speeds (so that hand-overs, re-allocations, re-tunes and
  climbs happen);
- every ``Params`` a tuner returns is valid (lanes per replica sum to p);
- no tuner module imports anything that imports asyncio.

Also: ``--tuner``'s choices, ``dtune get --help`` and the README's tuner
table all come from the registry.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from support.paths import REPO as ROOT

from dtune.accounting import OriginView, PartitionView, Snapshot
from dtune.netfacts import NetworkFacts
from dtune.params import Params
from dtune.tuners import registry
from dtune.tuners.base import Fixed, Tuner, TunerPlan, _init_params
from dtune.tuners.online_tuner import OnlineTuner

KB, MB = 1000, 1000 * 1000
SIZES = [100 * KB] * 40 + [8 * MB] * 10 + [300 * MB] * 3     # small, medium and large files
ORIGINS = ["http://a.test", "http://b.test", "http://c.test"]
FACTS = {
    "one-source": NetworkFacts(rtt=0.040, bandwidth=125e6, tcp_buffer=512 * 1024,
                               how={"rtt": "given", "bandwidth": "given", "tcp_buffer": "given"}),
    "replicas": NetworkFacts(rtt=0.020, bandwidth=125e6, tcp_buffer=512 * 1024,
                             how={"rtt": "measured", "bandwidth": "assumed", "tcp_buffer": "given"},
                             replica_origins=ORIGINS, replica_rtt=[0.020, 0.030, 0.060]),
}
FIXED = Fixed(cc=3, p=2, pp=5)
CASES = [(name, facts) for name in registry.TUNERS for facts in FACTS]
CASES += [("online:" + name, facts) for name in registry.TUNERS for facts in FACTS]


def build(name: str, facts: str, fixed: Fixed | None = None) -> Tuner:
    """The registry's tuner; ``online:NAME`` wraps it in the online search, as ``--online`` does."""
    replicas = len(FACTS[facts].replica_origins) or 1
    online = name.startswith("online:")
    tuner = registry.make_tuner(name.removeprefix("online:"), fixed=fixed, max_cc=16, max_partitions=2,
                                replicas=replicas, files=len(SIZES))
    return OnlineTuner(tuner, fixed=fixed) if online else tuner


def check_params(params: Params, replicas: int) -> None:
    """A valid Params: construction checks the ranges; the lanes match the replicas."""
    assert isinstance(params, Params)
    Params(**dataclasses.asdict(params))          # validates again, from plain values
    if replicas > 1 and params.lanes is not None:
        assert len(params.lanes) == replicas and sum(params.lanes) == params.p


def check_fixed(params: dict[str, Params], fixed: Fixed, *, files_left: bool = True) -> None:
    """p and pp everywhere; the groups of all partitions add up to the user's cc while any file is
    left (after the last file, a tuner may let them go). Only the values set are checked."""
    for name, p in params.items():
        assert fixed.p is None or p.p == fixed.p, (name, p)
        assert fixed.pp is None or p.pp == fixed.pp, (name, p)
    if fixed.cc is not None:
        total = sum(p.cc for p in params.values())
        assert total == fixed.cc if files_left else total <= fixed.cc, params


def snapshots(tplan: TunerPlan, sizes: list[int], replicas: int) -> Iterator[tuple[float, Snapshot]]:
    """Two minutes of one-second snapshots; partition i finishes in 30·(i+1) s."""
    names = list(tplan.params)
    totals = {n: sum(s for s, p in zip(sizes, tplan.partition_of, strict=True) if p == n) for n in names}
    counts = {n: tplan.partition_of.count(n) for n in names}
    for t in range(1, 121):
        parts = {}
        for i, n in enumerate(names):
            frac = min(1.0, t / (30.0 * (i + 1)))
            parts[n] = PartitionView(bytes=int(totals[n] * frac), bytes_resumed=0, bytes_total=totals[n],
                                     rate=totals[n] / (30.0 * (i + 1)), eta=None, files_total=counts[n],
                                     files_done=int(counts[n] * frac), lanes=1, params=tplan.params[n])
        moved = sum(v.bytes for v in parts.values())
        origins = {o: OriginView(bytes=moved // replicas, requests=t, rate=(r + 1) * 4e6)
                   for r, o in enumerate(ORIGINS[:replicas])} if replicas > 1 else {}
        yield float(t), Snapshot(elapsed=float(t), bytes=moved, bytes_resumed=0, bytes_total=sum(sizes),
                                 rate=moved / t, rate_inst=moved / t, eta=None, files_total=len(sizes),
                                 files_done=sum(v.files_done for v in parts.values()), files_skipped=0,
                                 files_failed=0, retries=0, connections=4, rtt=0.040, partitions=parts,
                                 origins=origins, energy={"joules": 12.0 * t, "watts": 12.0,
                                                          "kind": "estimated"})


def run(tuner: Tuner, facts: str) -> tuple[TunerPlan, list[tuple[Snapshot, dict[str, Params]]]]:
    """plan(), then update() over the simulated snapshots: the plan, and each decision with the
    snapshot it answered and every partition's params in force after it."""
    replicas = len(FACTS[facts].replica_origins) or 1
    tplan = tuner.plan(SIZES, FACTS[facts])
    first = dict(tplan.params)
    decisions = []
    for now, snap in snapshots(tplan, SIZES, replicas):
        d = tuner.update(now, snap)
        if d is not None:
            assert d.reason, "every decision says why"
            assert set(d.params) <= set(tplan.params)
            tplan.params.update(d.params)           # in force from now on, as the engine would
            decisions.append((snap, dict(tplan.params)))
    tplan.params = first
    return tplan, decisions


# ---- the checks --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "facts"), CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_get_params_holds_every_argument_and_constant_and_round_trips_json(name: str, facts: str) -> None:
    tuner = build(name, facts)
    for stage in ("built", "planned"):
        params = tuner.get_params()
        assert params["tuner"] == tuner.name
        for arg in _init_params(type(tuner)):
            value = getattr(tuner, arg)
            if dataclasses.is_dataclass(value) and not isinstance(value, Fixed):
                missing = [f.name for f in dataclasses.fields(value) if f.name not in params]
                assert not missing, f"{name}: constants {missing} not in get_params()"
            else:
                assert arg in params, f"{name}: argument {arg!r} not in get_params()"
        assert json.loads(json.dumps(params)) == params, f"{name} ({stage}): not plain JSON data"
        tuner.plan(SIZES, FACTS[facts])


@pytest.mark.parametrize(("name", "facts"), CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_plan_and_every_update_honour_the_fixed_values(name: str, facts: str) -> None:
    tuner = build(name, facts, FIXED)
    assert tuner.fixed == FIXED
    tplan, decisions = run(tuner, facts)
    check_fixed(tplan.params, FIXED)
    for snap, params in decisions:
        check_fixed(params, FIXED, files_left=snap.files_done < snap.files_total)


@pytest.mark.parametrize(("name", "facts"), CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_every_plan_and_decision_is_valid_params(name: str, facts: str) -> None:
    tuner = build(name, facts)
    replicas = len(FACTS[facts].replica_origins) or 1
    tplan, decisions = run(tuner, facts)
    assert len(tplan.partition_of) == len(SIZES) and set(tplan.partition_of) <= set(tplan.params)
    for params in [tplan.params, *(p for _, p in decisions)]:
        for p in params.values():
            check_params(p, replicas)
    total_cc = sum(p.cc for p in tplan.params.values())
    assert 1 <= total_cc <= 32, tplan.params   # max_cc 16; Di Tacchio's own cap is 32 groups


PARTIAL = [Fixed(p=2, pp=5), Fixed(cc=3, pp=5), Fixed(pp=1)]


@pytest.mark.parametrize("fixed", PARTIAL, ids=str)
@pytest.mark.parametrize("name", ["promc", "mc", "sc", "golike", "static", "dtree"])
def test_the_online_search_keeps_what_the_user_fixed_while_it_moves_the_rest(name: str, fixed: Fixed) -> None:
    tuner = build("online:" + name, "one-source", fixed)
    tplan, decisions = run(tuner, "one-source")
    assert decisions, "the search never moved"
    check_fixed(tplan.params, fixed)
    for snap, params in decisions:
        check_fixed(params, fixed, files_left=snap.files_done < snap.files_total)


def test_fixed_p_is_spread_over_replicas_not_replaced() -> None:
    # three replicas, p = 2 per group: two lanes in all, never one per replica (= 3)
    for name in ("mdtp", "promc", "mc"):
        params = build(name, "replicas", Fixed(p=2)).plan(SIZES, FACTS["replicas"]).params
        assert all(p.p == 2 and sum(p.lanes_per_replica()) == 2 for p in params.values()), (name, params)


# ---- purity --------------------------------------------------------------------------------------------
MODULES = ["base", "registry", "static", "golike", "heuristic", "promc", "mdtp", "dtree", "ditacchio",
           "online"]


def test_no_tuner_module_imports_anything_that_imports_asyncio() -> None:
    # dtune.model and dtune.energy are what dtree and ditacchio import when they run
    code = ("import sys\n"
            + "".join(f"import dtune.tuners.{m}\n" for m in MODULES)
            + "import dtune.model, dtune.energy\n"
            "bad = sorted(m for m in sys.modules if m == 'asyncio' or m.startswith('asyncio.'))\n"
            "print(','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"asyncio imported: {out.stdout.strip()}"


# ---- one list, three views ------------------------------------------------------------------------
def test_readme_tuner_table_is_the_registrys() -> None:
    readme = (ROOT / "README.md").read_text()
    assert registry.markdown_table() in readme, \
        "README.md's tuner table differs from the registry: paste dtune.tuners.registry.markdown_table()"


def test_get_help_and_choices_list_every_registered_tuner() -> None:
    from dtune.cli import build_parser
    parser = build_parser()
    get = parser._subparsers._group_actions[0].choices["get"]
    action = next(a for a in get._actions if a.dest == "tuner")
    from dtune.options import OPTIONS
    assert tuple(action.choices) == registry.TUNERS
    assert next(o for o in OPTIONS if o.name == "tuner").default == registry.DEFAULT
    text = get.format_help()
    assert all(name in text for name in registry.TUNERS)


def test_an_unknown_tuner_name_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown tuner 'fastest'.*promc"):
        registry.make_tuner("fastest")

