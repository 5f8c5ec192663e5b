"""Coverage-guided fuzzing (atheris / libFuzzer) of ``dtune serve``'s pure request deciders.

Not a pytest module and not run in CI: run it by hand for as long as you like,

    pip install atheris
    python tests/unit/server/fuzz_serve_paths_atheris.py -runs=2000000          # or -max_total_time=600

Each input is split by ``FuzzedDataProvider`` into a raw request path and
header values; the properties checked:

* ``split_target``: refuses (400/403/404 only) or returns a relative path with
  no ``..`` segment, no NUL, no backslash, not starting with '/', and whose
  ``url_path()`` decodes back to the same target (one decoding, no drift);
* ``Root.open`` on a real directory with a secret next to it and symlinks
  pointing at it: refuses, or opens a file whose real path is inside the
  root; the secret's inode is never opened (both the openat2 and the
  openat + /proc paths);
* ``plan_file_response``: always 200/206/304/416; a 206 lies inside the file;
* ``content_type``: always a non-empty ASCII string.

A crash prints the input that caused it (libFuzzer writes ``crash-*``). The
directory tree lives in ``$TMPDIR/dtune-atheris-tree`` (rebuilt at each start;
``rm -r`` it when done).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from dtune.server.conditions import etag_for, plan_file_response
    from dtune.server.paths import PathRejected, Root, split_target
    from dtune.server.protocol import content_type


def _tree() -> tuple[Path, int]:
    # libFuzzer leaves with exit(), skipping Python's clean-up: one fixed directory, rebuilt each run
    box = Path(tempfile.gettempdir()) / "dtune-atheris-tree"
    shutil.rmtree(box, ignore_errors=True)
    box.mkdir()
    (box / "secret.txt").write_text("secret\n")
    root = box / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")
    (root / "sub" / "b.txt").write_text("b\n")
    os.symlink("../secret.txt", root / "out")
    os.symlink(box / "secret.txt", root / "out-abs")
    os.symlink("..", root / "up")
    os.symlink("a.txt", root / "in")
    return root, os.stat(box / "secret.txt").st_ino


ROOT_DIR, SECRET_INODE = _tree()
ROOTS = [Root(ROOT_DIR), Root(ROOT_DIR, fast_open=False)]
REAL = os.path.realpath(ROOT_DIR)


def check_path(raw: bytes) -> None:
    try:
        target = split_target(raw)
    except PathRejected as exc:
        assert exc.status in (400, 403, 404), exc.status
        return
    rel = target.relbytes
    assert rel == b"." or (not rel.startswith(b"/") and b".." not in rel.split(b"/")), rel
    assert b"\x00" not in rel and b"\\" not in rel, rel
    again = split_target(target.url_path().encode("ascii"))
    assert again.relbytes == rel, (rel, again.relbytes)
    for root in ROOTS:
        try:
            fd, st, _real = root.open(target)
        except PathRejected:
            continue
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
            assert where == REAL or where.startswith(REAL + "/"), where
            assert st.st_ino != SECRET_INODE, "opened the secret"
        finally:
            os.close(fd)


def check_plan(fdp: atheris.FuzzedDataProvider) -> None:
    size = fdp.ConsumeIntInRange(0, 1 << 40)
    mtime = fdp.ConsumeIntInRange(0, 1 << 34)
    etag = etag_for(size, mtime * 10**9)
    values = [fdp.ConsumeUnicodeNoSurrogates(60) if fdp.ConsumeBool() else None for _ in range(4)]
    plan = plan_file_response(is_get=fdp.ConsumeBool(), size=size, mtime=mtime, etag=etag, range_value=values[0],
                              if_range=values[1], if_none_match=values[2], if_modified_since=values[3])
    assert plan.status in (200, 206, 304, 416), plan
    if plan.status == 206:
        assert 0 <= plan.start and plan.length > 0 and plan.start + plan.length <= size, (plan, size)


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    check_path(b"/" + fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200)))
    mime = content_type(fdp.ConsumeBytes(40))
    assert mime and mime.isascii(), mime
    check_plan(fdp)


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
