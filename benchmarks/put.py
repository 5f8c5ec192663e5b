#!/usr/bin/env python3
"""``dtune put`` against ``rclone copy`` and ``curl -T`` on loopback: moto's S3, Apache mod_dav, dtune serve.

    python benchmarks/put.py [--rounds 3] [--large-mib 128] [--small 200] [--out /tmp/dtune-put-bench]
                             [--destinations s3,webdav,serve] [--datasets large] [--baseline REV]

Two datasets, made once in a private ``dtune-bench-put-*`` directory: **mixed**
(``--small`` files of 4–256 KiB, 8 of 1–12 MiB and 2 of 24 MiB, in a few
sub-directories) and **large** (one file of ``--large-mib`` MiB). Three
destinations, started here on 127.0.0.1 (``--destinations`` picks some):
moto's S3 server (``python -m moto.server``, signatures unchecked), Apache
httpd with mod_dav (the test suite's ``ApacheDav(writable=True)``, from
``tests/support``) and ``dtune serve --writable --token-file`` (the test
suite's ``DtuneServe``). Tools:

* dtune     ``dtune put SRC DEST`` (defaults: tuner auto, every file verified after
            its upload: S3 by ETag and a HEAD, WebDAV by a HEAD's size, dtune serve
            by the Repr-Digest it answers; to dtune serve a large file goes in
            Content-Range pieces, p at once)
* rclone    ``rclone copy SRC remote:...`` with rclone's defaults (4 transfers,
            S3 chunks of 5 MiB with 4 uploaded at once; it checks the MD5 S3 answers);
            not to dtune serve (rclone has no backend that writes to it)
* curl      ``curl -T FILE URL`` (WebDAV and dtune serve, the large file only: curl
            makes no collections; to dtune serve with the bearer token, one PUT)
* dtune@REV with ``--baseline REV``: the same ``dtune put`` from the source of git
            revision REV (``git archive`` into the private directory, first on
            PYTHONPATH), interleaved with the others: a before/after in one run (S3 and
            WebDAV: a revision before the dtune serve destination has none)

Every run goes to a fresh prefix or collection, so nothing is skipped, and is
checked afterwards: on WebDAV and dtune serve every file byte-exact (SHA-256 of the served
copy), on S3 every key at its size. The
rounds are interleaved (round 1 runs every tool once on every case, then round
2, ...), so load on this shared machine hits each tool alike; the table gives
the median and the min–max of the throughput (MB/s of file bytes over the
tool's wall time, start-up included). Writes ``put.csv`` and ``put.png`` to
``--out``. Not a test.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dtune_lab.bench.report import pyplot, save_figure
from dtune_lab.procgroup import stop_group

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))   # the test suite's Apache mod_dav helper

KEY, SECRET = "dtune-bench", "dtune-bench-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_data(root: Path, small: int, large_mib: int) -> dict[str, Path]:
    rng = random.Random(38)
    mixed = root / "mixed"
    for i in range(small):
        path = mixed / f"d{i % 7}" / f"small-{i:04d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(4, 256) * 1024))
    for i in range(8):
        (mixed / "medium").mkdir(exist_ok=True)
        (mixed / "medium" / f"m{i}.bin").write_bytes(rng.randbytes(rng.randint(1, 12) << 20))
    for i in range(2):
        (mixed / f"big-{i}.bin").write_bytes(rng.randbytes(24 << 20))
    large = root / "large"
    large.mkdir()
    with open(large / "large.bin", "wb") as fh:
        for _ in range(large_mib):
            fh.write(rng.randbytes(1 << 20))
    return {"mixed": mixed, "large": large}


def warm_src(work: Path) -> Path:
    """A 1 KiB file to warm a tool up with (made once)."""
    warm = work / "src" / "warm"
    warm.mkdir(exist_ok=True)
    (warm / "w.bin").write_bytes(b"w" * 1024)
    return warm


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def start_moto(work: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    log = open(work / "moto.log", "wb")  # noqa: SIM115 -- the child holds it
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    endpoint = f"http://127.0.0.1:{port}"
    subprocess.run(["curl", "-s", "-X", "PUT", f"{endpoint}/dtune-bench"], check=True, capture_output=True)
    return proc, endpoint


def digests(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root``: relative path → (size, SHA-256) (not dtune serve's own ``.dtune``)."""
    out = {}
    for path in root.rglob("*"):
        if path.is_file() and path.relative_to(root).parts[0] != ".dtune":
            out[path.relative_to(root).as_posix()] = (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def s3_sizes(endpoint: str, prefix: str) -> dict[str, int]:
    """The objects under ``prefix`` of the bench bucket and their sizes (moto here checks no signature)."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=KEY,
                          aws_secret_access_key=SECRET)
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket="dtune-bench", Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            out[obj["Key"][len(prefix) + 1:]] = obj["Size"]
    return out


def run(argv: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {proc.stderr[-800:]}")
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--large-mib", type=int, default=128)
    ap.add_argument("--small", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "dtune-put-bench")
    ap.add_argument("--destinations", default="s3,webdav,serve",
                    help="which destinations to run, comma-separated (default: s3,webdav,serve)")
    ap.add_argument("--datasets", default="mixed,large", help="which datasets to run (comma-separated)")
    ap.add_argument("--baseline", metavar="REV", help="also run dtune from git revision REV (before/after)")
    args = ap.parse_args()
    wanted = set(args.destinations.split(","))
    if not wanted or not wanted <= {"s3", "webdav", "serve"}:
        print(f"--destinations {args.destinations}: choose among s3, webdav, serve", file=sys.stderr)
        return 2
    for tool in ("rclone", "curl"):
        if not shutil.which(tool):
            print(f"{tool} is not installed", file=sys.stderr)
            return 2
    from support.davservers import ApacheDav
    from support.realservers import DtuneServe

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dtune-bench-put-"))
    work.chmod(0o711)   # (Apache's user reaches the served directory through it)
    davroot = work / "davroot"
    davroot.mkdir()
    serveroot = work / "serveroot"
    serveroot.mkdir()
    token = work / "token"
    token.write_text(secrets.token_urlsafe(24) + "\n")
    token.chmod(0o600)
    headers = work / "auth-header"   # (curl -H @FILE: the token not on a command line)
    headers.write_text(f"Authorization: Bearer {token.read_text().strip()}\n")
    headers.chmod(0o600)
    moto = dav = served = None
    rows: list[dict] = []
    try:
        data = {k: v for k, v in make_data(work / "src", args.small, args.large_mib).items()
                if k in args.datasets.split(",")}
        base_env = None
        if args.baseline:
            tree = work / "baseline"
            tree.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline, "src", "lab/src"],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        endpoint = dav_url = ""
        if "s3" in wanted:
            moto, endpoint = start_moto(work)
        if "webdav" in wanted:
            dav = ApacheDav(davroot, writable=True)
            dav.start()
            dav_url = f"http://127.0.0.1:{dav.port}"
        served = DtuneServe(serveroot, "--writable", "--token-file", str(token)).start()
        serve_url = served.base
        base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}   # (AWS_CA_BUNDLE trips rclone)
        env = {**base, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1",
               "XDG_DATA_HOME": str(work / "xdg"), "XDG_CONFIG_HOME": str(work / "xdg"),
               "RCLONE_CONFIG_S3_TYPE": "s3", "RCLONE_CONFIG_S3_PROVIDER": "Other",
               "RCLONE_CONFIG_S3_ACCESS_KEY_ID": KEY, "RCLONE_CONFIG_S3_SECRET_ACCESS_KEY": SECRET,
               "RCLONE_CONFIG_S3_ENDPOINT": endpoint, "RCLONE_CONFIG_S3_REGION": "us-east-1",
               "RCLONE_CONFIG_S3_FORCE_PATH_STYLE": "true",
               "RCLONE_CONFIG_DAV_TYPE": "webdav", "RCLONE_CONFIG_DAV_URL": dav_url, "RCLONE_CONFIG_DAV_VENDOR": "other",
               "RCLONE_CONFIG": str(work / "rclone.conf")}
        dtune = [sys.executable, "-m", "dtune", "put", "--no-history", "--no-progress"]
        if args.baseline:
            base_env = {**env, "PYTHONPATH": f"{work / 'baseline' / 'src'}:{work / 'baseline' / 'lab' / 'src'}"}
            warmb = {"s3": dtune + [f"{warm_src(work)}/", "s3://dtune-bench/warmb/", "--endpoint-url", endpoint],
                     "webdav": dtune + [f"{warm_src(work)}/", f"{dav_url}/warmb/"]}
            for argv in (warmb[d] for d in sorted(wanted & set(warmb))):
                run(argv, base_env)   # (its first run compiles its bytecode: not part of any run)
        before = f"dtune@{args.baseline}" if args.baseline else None
        n = 0
        warm = warm_src(work)
        warmups = {"s3": [dtune + [f"{warm}/", "s3://dtune-bench/warm/", "--endpoint-url", endpoint],
                          ["rclone", "copy", str(warm), "s3:dtune-bench/warm2"]],
                   "webdav": [dtune + [f"{warm}/", f"{dav_url}/warm/"]],
                   "serve": [dtune + [f"{warm}/", f"{serve_url}/warm/", "--token-file", str(token)]]}
        for argv in (a for d in sorted(wanted) for a in warmups[d]):
            run(argv, env)   # (moto imports its S3 backend on the first requests: not part of any run)
        for rnd in range(1, args.rounds + 1):
            for dataset, src in data.items():
                nbytes = size_of(src)
                cases = [("s3", "dtune", lambda p, src=src: dtune + [f"{src}/", f"s3://dtune-bench/{p}/",
                                                                      "--endpoint-url", endpoint]),
                         ("s3", "rclone", lambda p, src=src: ["rclone", "copy", str(src), f"s3:dtune-bench/{p}"]),
                         ("webdav", "dtune", lambda p, src=src: dtune + [f"{src}/", f"{dav_url}/{p}/"]),
                         ("webdav", "rclone", lambda p, src=src: ["rclone", "copy", str(src), f"dav:{p}"])]
                if before:
                    cases[1:1] = [("s3", before, cases[0][2])]
                    cases[4:4] = [("webdav", before, cases[3][2])]
                if dataset == "large":
                    cases.append(("webdav", "curl", lambda p, src=src: [
                        "curl", "-sS", "--fail", "-T", str(src / "large.bin"), f"{dav_url}/{p}-large.bin"]))
                cases.append(("serve", "dtune", lambda p, src=src: dtune + [f"{src}/", f"{serve_url}/{p}/",
                                                                             "--token-file", str(token)]))
                if dataset == "large":
                    cases.append(("serve", "curl", lambda p, src=src: [
                        "curl", "-sS", "--fail", "-H", f"@{headers}", "-T", str(src / "large.bin"),
                        f"{serve_url}/{p}-large.bin"]))
                cases = [c for c in cases if c[0] in wanted]
                expected = digests(src)
                for dest, tool, argv in cases:
                    n += 1
                    seconds = run(argv(f"r{n}"), base_env if tool == before else env)
                    if dest == "s3":    # what arrived: every file, at its size
                        ok = s3_sizes(endpoint, f"r{n}") == {k: v[0] for k, v in expected.items()}
                    else:               # byte-exact
                        root = davroot if dest == "webdav" else serveroot
                        ok = (digests(root) == {f"r{n}-large.bin": expected["large.bin"]} if tool == "curl"
                              else digests(root / f"r{n}") == expected)
                    if not ok:
                        raise RuntimeError(f"round {rnd} {dataset} {dest} {tool}: the destination does not hold "
                                           f"the source")
                    rows.append({"round": rnd, "dataset": dataset, "destination": dest, "tool": tool,
                                 "bytes": nbytes, "seconds": round(seconds, 3),
                                 "mb_per_s": round(nbytes / seconds / 1e6, 2)})
                    print(f"round {rnd} {dataset:6} {dest:6} {tool:6} {seconds:7.2f} s "
                          f"{nbytes / seconds / 1e6:8.1f} MB/s", flush=True)
                    if dest != "s3":   # (the served copy only fills the disk)
                        for leftover in (davroot if dest == "webdav" else serveroot).iterdir():
                            if leftover.name != ".dtune":
                                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    finally:
        if dav is not None:
            dav.stop()
        if served is not None:
            served.stop()
        if moto is not None:
            stop_group(moto)
        shutil.rmtree(work, ignore_errors=True)
    with open(args.out / "put.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print("\n| dataset | destination | tool | MB/s median | min–max | ratio dtune/tool (median) |")
    print("|---|---|---|---:|---:|---:|")
    groups: dict[tuple[str, str, str], list[float]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["destination"], r["tool"]), []).append(r["mb_per_s"])
    for (dataset, dest, tool), rates in groups.items():
        ours = statistics.median(groups[(dataset, dest, "dtune")])
        ratio = "" if tool == "dtune" else f"{ours / statistics.median(rates):.2f}"
        print(f"| {dataset} | {dest} | {tool} | {statistics.median(rates):.1f} | {min(rates):.1f}–{max(rates):.1f} "
              f"| {ratio} |")
    # per-round ratios: each round ran every tool back to back, so its ratio shares that round's load
    by_round = {(r["round"], r["dataset"], r["destination"], r["tool"]): r["mb_per_s"] for r in rows}
    print("\n| dataset | destination | dtune / tool | per-round ratio median | min–max |")
    print("|---|---|---|---:|---:|")
    for (dataset, dest, tool) in groups:
        if tool == "dtune":
            continue
        ratios = [by_round[(rnd, dataset, dest, "dtune")] / by_round[(rnd, dataset, dest, tool)]
                  for rnd in range(1, args.rounds + 1) if (rnd, dataset, dest, tool) in by_round]
        print(f"| {dataset} | {dest} | {tool} | {statistics.median(ratios):.2f} | {min(ratios):.2f}–{max(ratios):.2f} |")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{d}\n{dest}\n{t}" for d, dest, t in groups]
    ax.bar(range(len(groups)), [statistics.median(v) for v in groups.values()],
           yerr=[[statistics.median(v) - min(v) for v in groups.values()],
                 [max(v) - statistics.median(v) for v in groups.values()]], capsize=3)
    ax.set_xticks(range(len(groups)), labels, fontsize=7)
    ax.set_ylabel("MB/s (median, min–max)")
    ax.set_title("dtune put vs rclone copy and curl -T on loopback (moto S3, Apache mod_dav, dtune serve)")
    save_figure(fig, args.out / "put.png")
    print(f"\nwrote {args.out / 'put.csv'} and {args.out / 'put.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
