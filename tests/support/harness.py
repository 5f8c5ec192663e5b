"""Running ``dtune get`` as a user does, and judging what it left behind.

Every run is a child process (``python -m dtune get ... --no-history``) with
short reliability settings (``FAST``), so a permanently broken source fails
in a second or two. ``run_get`` returns the exit code, both streams and the
parsed NDJSON events; it asserts, for every run, that stderr holds no Python
traceback.

The verdicts:

``assert_exact``   exit 0 and the output directory holds exactly the
                   expected files, byte for byte (no part or journal left).
``assert_failed``  exit 1; the file is named with its reason in the
                   ``--json`` summary (and, for a plain run, on exactly one
                   ``dtune: failed:`` line); no final file for it, only
                   its part file and journal in ``DIR/.dtune/`` may remain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

FAST = ("--retries", "1", "--stall-timeout", "1", "--connect-timeout", "2")
# ``report(tried=..., expected=...)``, later ``report(observed=...)`` (the ``report`` fixture)
Report = Callable[..., None]
LEFTOVER_SUFFIXES = (".dtune-part", ".dtune-journal")


def default_sigint() -> None:
    """``preexec_fn`` for a child a test sends SIGINT: a shell's background job starts with SIGINT
    ignored, and a child would inherit that (Python then installs no KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def child_env(home: Path, **extra: str) -> dict[str, str]:
    """A child's environment that writes nothing under the real home directory, and reads no
    ``~/.netrc`` of the developer's (``NETRC`` names one in ``home``, absent unless a test writes it)."""
    env = {**os.environ, "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache"),
           "XDG_CONFIG_HOME": str(home / "config"), "NETRC": str(home / "netrc"), "PYTHONUNBUFFERED": "1",
           **extra}
    env.pop("DTUNE_DEBUG", None)
    return env


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float
    events: list[dict] = field(default_factory=list)

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == kind]

    @property
    def summary(self) -> dict:
        found = self.of("summary")
        assert len(found) == 1, f"expected one summary event, got {len(found)}: {self.stdout[-2000:]}"
        return found[0]

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def get_argv(sources: Sequence[str], out: Path, *extra: str, json_events: bool = True) -> list[str]:
    argv = [sys.executable, "-m", "dtune", "get", *sources, "-o", str(out), "--no-history",
            "--no-progress", *FAST, *extra]
    return [*argv, "--json"] if json_events else argv


def _finish(proc: subprocess.Popen, started: float, timeout: float, json_events: bool) -> Outcome:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        raise AssertionError(f"dtune get did not finish within {timeout} s; stderr: {stderr[-2000:]}") from None
    outcome = Outcome(proc.returncode, stdout, stderr, time.monotonic() - started)
    assert "Traceback" not in stderr, stderr
    if json_events:
        for line in stdout.splitlines():
            event = json.loads(line)  # every stdout line is one JSON object
            assert isinstance(event, dict) and isinstance(event.get("event"), str), line
            outcome.events.append(event)
    return outcome


def start_get(env: dict[str, str], sources: Sequence[str], out: Path, *extra: str,
              json_events: bool = True, preexec: Callable[[], None] | None = None) -> subprocess.Popen:
    """Start ``dtune get``; ``preexec`` runs in the child first (e.g. to lower a resource limit)."""
    return subprocess.Popen(get_argv(sources, out, *extra, json_events=json_events), env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=preexec)


def finish(proc: subprocess.Popen, started: float, timeout: float = 60, json_events: bool = True) -> Outcome:
    """Wait for a ``dtune get`` that ``start_get`` started (killed after ``timeout``) and read it."""
    return _finish(proc, started, timeout, json_events)


def run_get(env: dict[str, str], sources: Sequence[str], out: Path, *extra: str,
            json_events: bool = True, timeout: float = 60, preexec: Callable[[], None] | None = None) -> Outcome:
    started = time.monotonic()
    proc = start_get(env, sources, out, *extra, json_events=json_events, preexec=preexec)
    return _finish(proc, started, timeout, json_events)


def run_both(env: dict[str, str], sources: Sequence[str], out: Path, *extra: str,
             timeout: float = 60) -> tuple[Outcome, Outcome]:
    """The same transfer with ``--json`` (into ``out``) and plain (into ``out``-plain), at once."""
    started = time.monotonic()
    procs = (start_get(env, sources, out, *extra, json_events=True),
             start_get(env, sources, out.with_name(out.name + "-plain"), *extra, json_events=False))
    return (_finish(procs[0], started, timeout, True), _finish(procs[1], started, timeout, False))


# ---- verdicts -------------------------------------------------------------------------------------
def tree(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (symlinks not followed) by relative path."""
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                found[str(path.relative_to(root))] = path.read_bytes()
    return found


def assert_exact(outcome: Outcome, out: Path, expected: dict[str, bytes]) -> None:
    assert outcome.code == 0, (outcome.code, outcome.stderr, outcome.stdout[-3000:])
    got = tree(out)
    assert sorted(got) == sorted(expected), f"files differ: {sorted(got)} != {sorted(expected)}"
    for rel, data in expected.items():
        assert got[rel] == data, f"{rel}: {len(got[rel])} bytes on disk differ from the {len(data)} served"
    if outcome.events:
        summary = outcome.summary
        # (a rerun keeps what an earlier run finished: kept, not verified by this run; the bytes
        # on disk were compared with the served ones above)
        assert summary["files_failed"] == 0
        assert summary["files_verified"] + summary.get("files_kept", 0) == len(expected), summary


def failure_reason(outcome: Outcome, relpath: str) -> str:
    """The reason the ``--json`` summary gives for ``relpath`` (there must be exactly one)."""
    failed = outcome.summary["failed"]
    mine = [f for f in failed if f["file"] == relpath]
    assert len(mine) == 1, f"{relpath} not failed exactly once: {failed}"
    return mine[0]["reason"]


def assert_failed(outcome: Outcome, out: Path, relpath: str, words: Sequence[str]) -> str:
    """Exit 1, ``relpath`` failed for a reason containing one of ``words``; returns the reason line."""
    assert outcome.code == 1, (outcome.code, outcome.stderr, outcome.stdout[-3000:])
    if outcome.events:
        reason = failure_reason(outcome, relpath)
        extra = outcome.stderr_lines  # --json puts reasons on stdout; at most one line may repeat it
        assert len(extra) <= 1 and all(x.startswith("dtune: ") and relpath in x for x in extra), outcome.stderr
    else:
        lines = [x for x in outcome.stderr_lines if x.startswith("dtune: failed:")]
        assert len(lines) == 1, outcome.stderr
        reason = lines[0].removeprefix("dtune: failed: ")
        assert all(x.startswith("dtune: ") for x in outcome.stderr_lines), outcome.stderr
    assert relpath in reason, reason
    assert any(w.lower() in reason.lower() for w in words), f"none of {list(words)} in {reason!r}"
    final = out / relpath
    assert not final.exists() and not final.is_symlink(), f"{final} exists after a failure"
    for path in tree(out):
        if path == relpath or path.startswith(relpath + "."):
            assert path.endswith(LEFTOVER_SUFFIXES), f"unexpected leftover {path}"
    return reason


def assert_one_line_error(outcome: Outcome, words: Sequence[str]) -> str:
    """Exit 1 before any transfer: exactly one ``dtune: ...`` line on stderr containing one of ``words``."""
    assert outcome.code == 1, (outcome.code, outcome.stderr, outcome.stdout[-3000:])
    lines = outcome.stderr_lines
    assert len(lines) == 1 and lines[0].startswith("dtune: "), outcome.stderr
    assert any(w.lower() in lines[0].lower() for w in words), f"none of {list(words)} in {lines[0]!r}"
    return lines[0]
