"""Stopping ``dtune get`` the hard way: SIGKILL and SIGINT mid-dataset, a full disk, a read-only one.

The dataset is 20 files of 8 MiB served by a real nginx whose ``limit_rate``
stretches a run with fixed parameters (cc·p·pp = 4·2·2 = 16 requests in flight
at most) over about seven seconds. The kill lands when the ``--json`` events
on dtune's stdout (``progress`` each second, ``file_done`` per file) say about
10 %, 50 % or 90 % is on disk. Then:

* every final file present is byte-exact (nothing incomplete is ever named done);
* the rerun resumes: its ``start`` event counts exactly the finished files and the
  journalled bytes as resumed, its ``summary`` moves exactly the rest, and the
  files end byte-exact with no part or journal left;
* from nginx's access log (``$http_range``, ``$body_bytes_sent``): the rerun asks
  for no finished file and for no byte twice, and every byte it asks for again
  lay in a request that was in flight at the kill (sent, not all journalled).

The disk cases mount a small tmpfs as the output directory (root only; skipped
otherwise, with the reason): 20 MiB into 5 MiB must fail the files that do not
fit with one line each naming the file and "no space left on device", and
after the mount grows the rerun completes; a read-only mount must fail with
"read-only file system". Mounts are removed in ``finally`` blocks.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.harness import Report, default_sigint
from support.realservers import Nginx, Unavailable, public_dir

from dtune.engine.journal import parse_journal
from dtune.engine.ranges import RangeSet
from dtune.statedir import Place

MIB = 1 << 20
FILES = 20
SIZE = 8 * MIB
TOTAL = FILES * SIZE
CC, P, PP = 4, 2, 2                  # at most CC·P·PP = 16 requests in flight
RATE = "3m"                          # nginx limit_rate per connection: 8 connections → ~24 MiB/s, ~7 s


@dataclass
class Served:
    nginx: Nginx
    files: dict[str, bytes]       # name → bytes
    prefix: str                   # URL path of the directory

    @property
    def url(self) -> str:
        return f"{self.nginx.base}{self.prefix}"


def _serve(tmp_factory: str, files: dict[str, bytes], sub: str, rate: str | None) -> Iterator[Served]:
    root = public_dir(tmp_factory)
    try:
        (root / sub).mkdir(mode=0o755)
        for name, data in files.items():
            (root / sub / name).write_bytes(data)
            (root / sub / name).chmod(0o644)
        try:
            nginx = Nginx(root, location_extra=f"limit_rate {rate};" if rate else "").start()
        except Unavailable as exc:
            pytest.skip(f"nginx not available: {exc}")
        try:
            yield Served(nginx, files, f"/{sub}/")
        finally:
            nginx.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def slow() -> Iterator[Served]:
    files = {f"f{i:02d}.bin": os.urandom(SIZE) for i in range(FILES)}
    yield from _serve("dtune-test-crash-", files, "big", RATE)


@pytest.fixture(scope="module")
def fast() -> Iterator[Served]:
    files = {f"s{i:02d}.bin": os.urandom(MIB + i) for i in range(10)}       # one request each, no journal
    files |= {f"m{i}.bin": os.urandom(5 * MIB + i) for i in range(2)}      # ranges, journal, fallocate
    yield from _serve("dtune-test-disk-", files, "mixed", None)


def get_cmd(url: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dtune", "get", url, "-o", str(out), "--cc", str(CC), "-p", str(P),
            "--pp", str(PP), "--tuner", "static", "--no-history", "--no-progress", *extra]


def events_of(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# ---- what the disk says ----------------------------------------------------------------------------
def journalled(final: Path) -> RangeSet:
    try:
        state = parse_journal(Path(Place.of(str(final), final.name).journal).read_bytes())
    except FileNotFoundError:
        return RangeSet()
    return state.done if state is not None else RangeSet()


def on_disk(out: Path, files: dict[str, bytes]) -> dict[str, RangeSet]:
    """Per file, the bytes a rerun may trust: all of a final file, else what its journal names."""
    have = {}
    for name, data in files.items():
        final = out / name
        if final.exists():
            assert final.read_bytes() == data, f"{name} is in place but not byte-exact"
            assert not os.path.exists(Place.of(str(final), name).part)
            have[name] = RangeSet([(0, len(data))])
        else:
            have[name] = journalled(final)
    return have


def assert_complete(out: Path, files: dict[str, bytes]) -> None:
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(files), f"leftovers or missing files: {names} {sorted(str(p) for p in out.rglob('*'))}"
    for name, data in files.items():
        assert hashlib.sha256((out / name).read_bytes()).digest() == hashlib.sha256(data).digest(), name


def overlap(spans, start: int, end: int) -> int:  # type: ignore[no-untyped-def]
    return sum(min(end, e) - max(start, s) for s, e in spans if s < end and e > start)


def span_of(header: str | None, size: int) -> tuple[int, int]:
    if not header:
        return 0, size
    first, _, last = header.removeprefix("bytes=").partition("-")
    return int(first), min(size, int(last) + 1)


# ---- a run that is stopped --------------------------------------------------------------------------
@dataclass
class Stopped:
    code: int
    at_fraction: float          # what the events said when the signal went
    done_before: list[str]      # files reported done before the signal
    t_started: float            # time.time() before the start and when the signal went
    t_signal: float
    stderr: str


def run_until(cmd: list[str], env: dict[str, str], fraction: float, sig: int, tmp: Path) -> Stopped:
    """Start ``dtune get --json``; send ``sig`` once its events say ``fraction`` of the bytes are done."""
    err = open(tmp / "stopped.stderr", "w+b")  # noqa: SIM115 - closed below
    t_started = time.time()
    proc = subprocess.Popen([*cmd, "--json"], stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                            preexec_fn=default_sigint,
                            env=env, text=True)
    done: list[str] = []
    seen = 0.0
    t_signal = 0.0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            kind = event["event"]
            if kind == "file_done":
                done.append(event["file"])
            elif kind == "progress":
                seen = max(seen, event["bytes"] / TOTAL)
            seen = max(seen, len(done) * SIZE / TOTAL)
            if seen >= fraction:
                t_signal = time.time()
                proc.send_signal(sig)
                break
        assert t_signal, f"dtune get ended (exit {proc.wait()}) before {fraction:.0%} was reached"
        code = proc.wait(20)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        err.close()
    return Stopped(code, seen, done, t_started, t_signal, stderr)


def run(cmd: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        raise AssertionError(f"dtune get did not finish within {timeout:g} s; stderr: {(said or '')[-3000:]}; "
                             f"stdout: {(out or '')[-3000:]}") from None
    assert "Traceback" not in done.stderr, done.stderr
    return done


STOPS = [("SIGKILL", signal.SIGKILL, 0.10), ("SIGKILL", signal.SIGKILL, 0.50), ("SIGKILL", signal.SIGKILL, 0.90),
         ("SIGINT", signal.SIGINT, 0.50)]


@pytest.mark.nginx
@pytest.mark.parametrize(("name", "sig", "fraction"), STOPS, ids=[f"{n}-{int(f * 100)}%" for n, _, f in STOPS])
def test_a_stopped_dataset_resumes_byte_exact_and_refetches_only_bytes_in_flight(
        name: str, sig: int, fraction: float, slow: Served, env: dict[str, str], tmp_path: Path,
        report: Report) -> None:
    report(tried=f"{name} `dtune get` of {FILES} × 8 MiB (nginx limit_rate, cc·p·pp = 16) "
                 f"at about {fraction:.0%}, then the same command again",
           expected="no incomplete file in place; rerun byte-exact, re-fetching only bytes "
                    "that were in flight" + ("; exit 130" if sig == signal.SIGINT else ""))
    out = tmp_path / "out"
    cmd = get_cmd(slow.url, out)
    stopped = run_until(cmd, env, fraction, sig, tmp_path)
    assert "Traceback" not in stopped.stderr, stopped.stderr
    if sig == signal.SIGINT:
        assert stopped.code == 130 and "interrupted" in stopped.stderr, (stopped.code, stopped.stderr)
    else:
        assert stopped.code == -signal.SIGKILL

    have = on_disk(out, slow.files)           # asserts every final file present is byte-exact
    for f in stopped.done_before:
        assert have[f].covers(0, SIZE), f"{f} was reported done but is not complete on disk"
    resumed = sum(r.total() for r in have.values())
    assert 0 < resumed < TOTAL, "stopped too early or too late to test a resume"

    time.sleep(0.3)  # nginx logs the cut requests when it notices the closed connections
    t_rerun = time.time()
    again = run([*cmd, "--json"], env)
    assert again.returncode == 0, again.stderr
    assert_complete(out, slow.files)
    events = events_of(again.stdout)
    start = next(e for e in events if e["event"] == "start")
    summary = next(e for e in events if e["event"] == "summary")
    assert start["bytes_resumed"] == resumed
    assert summary["bytes"] == TOTAL - resumed, "each missing byte must be fetched exactly once"

    time.sleep(0.2)
    log = [g for g in slow.nginx.log() if g.method == "GET" and g.uri.startswith(slow.prefix)]
    refetched = in_flight_bytes = in_flight = 0
    for fname, done in have.items():
        uri = slow.prefix + fname
        first = [span_of(g.range, SIZE) for g in log if g.uri == uri and stopped.t_started - 0.01 < g.start
                 < stopped.t_signal]
        again_spans = [span_of(g.range, SIZE) for g in log if g.uri == uri and g.start >= t_rerun - 0.01]
        if done.covers(0, SIZE):
            assert not again_spans, f"the rerun asked for {fname}, which was complete"
            continue
        # the endgame may cut a long range's tail for an idle connection (a "steal" event): the victim
        # asked for the tail too, but stopped before it; any other byte asked twice is a fault
        cut = sum(e["end"] - e["start"] for e in events if e["event"] == "steal" and e["file"] == fname)
        assert RangeSet(again_spans) == done.complement(SIZE) and sum(e - s for s, e in again_spans) == \
            SIZE - done.total() + cut, f"{fname}: the rerun must ask for exactly the missing bytes, once"
        open_spans = [(s, e) for s, e in first if not done.covers(s, e)]
        in_flight += len(open_spans)
        in_flight_bytes += sum((e - s) - overlap(done, s, e) for s, e in open_spans)
        refetched += sum(overlap(again_spans, s, e) for s, e in first)
    assert in_flight <= CC * P * PP
    assert refetched <= in_flight_bytes
    report(observed=f"stopped at {stopped.at_fraction:.0%} (exit {stopped.code}); "
                    f"{len(stopped.done_before)} files done, {resumed / MIB:.1f} MiB resumed; "
                    f"rerun exit 0 byte-exact, moved {summary['bytes'] / MIB:.1f} MiB, re-fetched "
                    f"{refetched / MIB:.2f} MiB ≤ {in_flight_bytes / MIB:.2f} MiB in {in_flight} "
                    "requests in flight")


# ---- disks that refuse ------------------------------------------------------------------------------
def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``tmpfs("5m")`` mounts a tmpfs of that size (root only) and returns it; unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def make(size: str) -> Path:
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        try:
            _mount("-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(point))
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            pytest.skip(f"cannot mount a tmpfs here: {getattr(exc, 'stderr', '') or exc}")
        mounted.append(point)
        return point

    try:
        yield make
    finally:
        for point in reversed(mounted):
            if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(point)], capture_output=True)


def failed_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("dtune: failed:")]


@pytest.mark.nginx
def test_a_full_disk_fails_the_files_that_do_not_fit_clearly_and_a_rerun_with_space_completes(
        fast: Served, tmpfs: Callable[[str], Path], env: dict[str, str], report: Report) -> None:
    total = sum(len(d) for d in fast.files.values())
    report(tried=f"{total / MIB:.0f} MiB ({len(fast.files)} files of 1 and 5 MiB) into a 5 MiB "
                 "tmpfs; then the tmpfs grown to 64 MiB and the same command again",
           expected="exit 1, one line per failed file naming it and 'no space left on device', "
                    "no incomplete file in place; rerun exit 0 byte-exact")
    out = tmpfs("5m")
    first = run(get_cmd(fast.url, out), env)
    assert first.returncode == 1, first.stderr
    lines = failed_lines(first.stderr)
    assert lines and all("no space left on device" in line for line in lines), first.stderr
    assert all(any(name in line for name in fast.files) for line in lines), lines
    assert all(line.startswith("dtune: ") for line in first.stderr.splitlines() if line.strip()), first.stderr
    have = on_disk(out, fast.files)  # every final file present is byte-exact
    finished = [n for n, r in have.items() if (out / n).exists()]
    assert len(lines) + len(finished) == len(fast.files)

    # a file that had bytes on disk says they are kept for the rerun, in its part file
    kept = [(m.group(1), int(m.group(2))) for line in lines
            if (m := re.search(r"failed: (\S+): .*the (\d+) bytes already written are kept", line))]
    assert all(os.path.exists(Place.of(str(out / name), name).part) for name, _ in kept), kept

    _mount("-o", "remount,size=64m", str(out))
    again = run([*get_cmd(fast.url, out), "--json"], env)
    assert again.returncode == 0, again.stderr
    assert_complete(out, fast.files)
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["event"] == "summary" and summary["bytes_resumed"] >= sum(n for _, n in kept), summary
    report(observed=f"exit 1 with {len(lines)} lines like `{lines[0][:100]}`; {len(kept)} of them keep "
                    f"their bytes for the rerun; {len(finished)} files in place, all exact; after "
                    f"remount the rerun exit 0, byte-exact, {summary['bytes_resumed'] / MIB:.1f} MiB resumed")


NO_FALLOCATE = """\
import errno, os
def _refuse(fd, offset, length):
    raise OSError(errno.EOPNOTSUPP, "Operation not supported")
os.posix_fallocate = _refuse
"""


@pytest.mark.nginx
def test_a_disk_that_fills_mid_file_keeps_the_part_for_the_rerun_and_says_so(
        fast: Served, tmpfs: Callable[[str], Path], env: dict[str, str], tmp_path: Path,
        report: Report) -> None:
    report(tried="the two 5 MiB files alone into a 3 MiB tmpfs, on a file system without fallocate "
                 "(space is not reserved up front: the disk fills halfway through a file); then the "
                 "tmpfs grown and the same command again",
           expected="exit 1, each failed file's line says how many bytes are kept in its part file; "
                    "the rerun resumes them and ends byte-exact")
    big = {n: d for n, d in fast.files.items() if n.startswith("m")}
    listing = tmp_path / "big.urls"
    listing.write_text("".join(f"{fast.url}{n}\n  out={n}\n" for n in big))
    seam = tmp_path / "no-fallocate"   # a sitecustomize that makes posix_fallocate unsupported
    seam.mkdir()
    (seam / "sitecustomize.py").write_text(NO_FALLOCATE)
    plain_fs = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(seam), env.get("PYTHONPATH")]))}
    out = tmpfs("3m")
    first = run(get_cmd(str(listing), out, "--json"), plain_fs, timeout=60)
    assert first.returncode == 1, first.stderr
    lines = [f"{e['file']}: {e['reason']}" for e in json.loads(first.stdout.strip().splitlines()[-1])["failed"]]
    kept = [(m.group(1), int(m.group(2))) for line in lines
            if (m := re.search(r"^(\S+): .*the (\d+) bytes already written are kept in \S+: the "
                               r"same command resumes", line))]
    assert kept, lines
    assert all(os.path.exists(Place.of(str(out / name), name).part) for name, _ in kept), kept
    _mount("-o", "remount,size=64m", str(out))
    again = run(get_cmd(str(listing), out, "--json"), plain_fs)
    assert again.returncode == 0, again.stderr
    assert_complete(out, big)
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["bytes_resumed"] >= sum(n for _, n in kept) > 0, (summary, kept)
    report(observed=f"exit 1: `{lines[0][-150:]}`; the rerun resumed {summary['bytes_resumed'] / MIB:.1f} "
                    f"MiB and ended byte-exact")


@pytest.mark.nginx
@pytest.mark.parametrize("where", ["mount-root", "missing-subdir"])
def test_a_read_only_output_directory_is_a_clear_error(
        where: str, fast: Served, tmpfs: Callable[[str], Path], env: dict[str, str], report: Report) -> None:
    place = "the mount itself" if where == "mount-root" else "a directory that does not exist yet on it"
    report(tried=f"-o on a read-only tmpfs ({place})",
           expected="exit 1, one line per file (or one line for the directory) saying "
                    "'read-only file system', nothing written")
    mount = tmpfs("8m")
    _mount("-o", "remount,ro", str(mount))
    out = mount if where == "mount-root" else mount / "sub"
    done = run(get_cmd(fast.url, out), env)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("dtune: ") for line in lines), done.stderr
    if where == "mount-root":
        failed = failed_lines(done.stderr)
        assert len(failed) == len(fast.files), done.stderr
        assert all("read-only file system" in line for line in failed), failed
    else:
        assert len(lines) == 1 and "read-only file system" in lines[0].lower(), done.stderr
    assert list(mount.iterdir()) == []
    report(observed=f"exit 1: `{(failed_lines(done.stderr) or lines)[0][:110]}`")
