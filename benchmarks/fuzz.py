"""The long fuzz run: every property test of a parser of untrusted input, with a larger budget.

Runs ``pytest -m fuzz tests`` with ``DTUNE_FUZZ_EXAMPLES`` set to ``--examples`` (the CI budget
is 100 per test, ``tests/support/fuzz.py``), reads hypothesis's statistics
(``--hypothesis-show-statistics``) and the JUnit report, and gives per test: the examples
run (passing and failing, over every phase), the failures found, and the seconds it took.
It prints a table, writes ``fuzz.csv``, ``fuzz.png`` (examples per second, when matplotlib
is installed), the raw pytest output and JUnit XML into ``--out``, and rewrites the section
between ``<!-- fuzz-counts:start -->`` and ``<!-- fuzz-counts:end -->`` of
``docs/reliability.md`` (the reliability table further down that page is left alone).

    python benchmarks/fuzz.py                      # 5000 examples per test
    python benchmarks/fuzz.py --examples 2000      # about 10 minutes on 2 cores
    python benchmarks/fuzz.py --examples 300 --no-doc -k cookie

Exit status: 0 when no test failed, 1 otherwise (the table names the failing ones; the
falsifying examples are in ``pytest.txt``).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "reliability.md"
START = "<!-- fuzz-counts:start -->"
END = "<!-- fuzz-counts:end -->"
# hypothesis --hypothesis-show-statistics: a test's node id, then one block per phase
_TEST = re.compile(r"^(\S+::\S+?)(?:\[[^\]]*\])?:\s*$")
_COUNTS = re.compile(r"^\s*- (\d+) passing examples?, (\d+) failing examples?, (\d+) invalid examples?")


@dataclass
class Row:
    test: str
    examples: int = 0      # passing + failing, every phase
    failing: int = 0       # failing examples hypothesis ran (shrinking counts each step)
    invalid: int = 0
    seconds: float = 0.0   # the test's wall time from the JUnit report
    outcome: str = "passed"  # passed | failed | error | skipped


def parse_statistics(text: str) -> dict[str, Row]:
    """Per test id, the examples of every phase added up."""
    rows: dict[str, Row] = {}
    current: Row | None = None
    for line in text.splitlines():
        m = _TEST.match(line)
        if m and not line.startswith(" "):
            current = rows.setdefault(m.group(1), Row(m.group(1)))
            continue
        c = _COUNTS.match(line)
        if c and current is not None:
            current.examples += int(c.group(1)) + int(c.group(2))
            current.failing += int(c.group(2))
            current.invalid += int(c.group(3))
    return rows


def parse_junit(path: Path, rows: dict[str, Row]) -> None:
    """Time and outcome of each test case; a case without statistics (not a hypothesis test) gets a row too."""
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        test_id = f"{module}::{case.get('name', '').split('[')[0]}"
        row = rows.setdefault(test_id, Row(test_id))
        row.seconds += float(case.get("time", 0) or 0)
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                row.outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]


def table(rows: list[Row]) -> list[str]:
    out = ["| test | examples | failing | invalid | s | examples/s | outcome |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        rate = f"{r.examples / r.seconds:.0f}" if r.seconds > 0 and r.examples else ""
        out.append(f"| `{r.test}` | {r.examples} | {r.failing} | {r.invalid} | {r.seconds:.1f} | {rate} | "
                   f"{r.outcome} |")
    total = sum(r.examples for r in rows)
    out.append(f"| **{len(rows)} tests** | **{total}** | **{sum(r.failing for r in rows)}** | "
               f"**{sum(r.invalid for r in rows)}** | **{sum(r.seconds for r in rows):.0f}** | | |")
    return out


def rewrite_doc(doc: Path, lines: list[str]) -> None:
    text = doc.read_text()
    begin, end = text.find(START), text.find(END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{doc}: the markers {START!r} and {END!r} are missing")
    doc.write_text(text[:begin + len(START)] + "\n" + "\n".join(lines) + "\n" + text[end:])


def plot(rows: list[Row], path: Path) -> bool:
    try:
        import matplotlib  # (optional: only for the plot)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # (optional, as above)
    except ImportError:
        return False
    shown = [r for r in rows if r.examples and r.seconds > 0]
    if not shown:
        return False
    fig, ax = plt.subplots(figsize=(9, 0.3 * len(shown) + 1.5))
    ax.barh([r.test.split("::")[-1][:60] for r in shown], [r.examples / r.seconds for r in shown],
            color=["tab:red" if r.outcome != "passed" else "tab:blue" for r in shown])
    ax.set_xscale("log")
    ax.set_xlabel("examples per second (log)")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def commit_of(repo: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=5000, help="DTUNE_FUZZ_EXAMPLES: examples per test (5000)")
    ap.add_argument("--out", type=Path, default=None,
                    help="directory for fuzz.csv, fuzz.png, pytest.txt, junit.xml (/tmp/dtune-fuzz-out-TIME)")
    ap.add_argument("--doc", type=Path, default=DOC, help="the page whose fuzz-counts section is rewritten")
    ap.add_argument("--no-doc", action="store_true", help="leave docs/reliability.md alone")
    ap.add_argument("-k", dest="keyword", default=None, help="only tests matching this pytest -k expression")
    ap.add_argument("paths", nargs="*", default=["tests"], help="test paths (tests)")
    args = ap.parse_args(argv)
    out = args.out or Path(f"/tmp/dtune-fuzz-out-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    junit = out / "junit.xml"
    env = dict(os.environ, DTUNE_FUZZ_EXAMPLES=str(args.examples))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), str(REPO / "lab" / "src"),
                                                      env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "pytest", "-m", "fuzz", *args.paths, "-p", "no:randomly", "-p", "no:cacheprovider",
           "--hypothesis-show-statistics", f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    if args.keyword:
        cmd += ["-k", args.keyword]
    print(f"$ DTUNE_FUZZ_EXAMPLES={args.examples} python {' '.join(cmd[1:])}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    (out / "pytest.txt").write_text(proc.stdout + proc.stderr)
    rows = parse_statistics(proc.stdout)
    if junit.exists():
        parse_junit(junit, rows)
    ordered = sorted(rows.values(), key=lambda r: r.test)
    if not ordered:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        print("no fuzz test ran", file=sys.stderr)
        return 1
    lines = table(ordered)
    print("\n".join(lines))
    with open(out / "fuzz.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(ordered[0])))
        writer.writeheader()
        writer.writerows(asdict(r) for r in ordered)
    plotted = plot(ordered, out / "fuzz.png")
    failed = [r for r in ordered if r.outcome in ("failed", "error")]
    print(f"\n{len(ordered)} tests, {sum(r.examples for r in ordered)} examples, {len(failed)} failed, "
          f"{wall:.0f} s wall; {out}/fuzz.csv" + (f", {out}/fuzz.png" if plotted else ""))
    if not args.no_doc:
        head = [f"Last long run: `python benchmarks/fuzz.py --examples {args.examples}` on commit "
                f"{commit_of(REPO)}, {time.strftime('%Y-%m-%d', time.gmtime())}: {len(ordered)} tests, "
                f"{sum(r.examples for r in ordered)} examples, {len(failed)} failed, {wall / 60:.1f} min wall "
                f"on 2 shared cores. `examples` counts every example hypothesis ran (generated, replayed "
                f"and shrunk); `failing` the ones that broke an invariant; `invalid` the ones a strategy "
                f"filtered out. Tests without hypothesis (a check after the fuzzing) show 0 examples.", ""]
        rewrite_doc(args.doc, head + lines)
        print(f"rewrote the fuzz counts in {args.doc}")
    return 1 if failed or proc.returncode not in (0, 5) else 0


if __name__ == "__main__":
    sys.exit(main())
