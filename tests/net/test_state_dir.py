"""dtune's own files in ``DIR/.dtune/`` (``dtune.statedir``) against hostile listings and stale journals,
through ``dtune get`` in a child process and a ``FakeServer`` on 127.0.0.1.

A listing that holds ``a`` and ``a.dtune-part`` (an older dtune's names), a journal of another
source, a journal with wrong-typed fields, an older dtune's partial download, a symlink planted at
``.dtune``: every file ends with its own bytes or a clear refusal, and the exit code says which.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from support.fakeserver import FakeServer
from support.harness import run_get, tree

from dtune.engine.journal import MAGIC
from dtune.statedir import Place

MIB = 1 << 20
SMALL = ("--cc", "1", "-p", "2")


def journal_text(header: dict, *ranges: tuple[int, int]) -> str:
    return MAGIC + json.dumps(header) + "\n" + "".join(f"R {s} {e}\n" for s, e in ranges)


def place(out: Path, relpath: str) -> Place:
    return Place.of(str(out / relpath), relpath)


def plant(out: Path, relpath: str, part: bytes, journal: str) -> Place:
    """A part file and journal in the state directory, as a killed run leaves them."""
    p = place(out, relpath)
    os.makedirs(p.parts_dir, exist_ok=True)
    Path(p.part).write_bytes(part)
    Path(p.journal).write_text(journal)
    return p


def warnings(outcome) -> list[str]:  # noqa: ANN001
    return [e["reason"] for e in outcome.events if e["event"] == "warning"]


def test_a_listing_with_dtune_names_gets_its_own_bytes_under_each_name_and_dot_dtune_is_refused(
        tmp_path: Path, env: dict[str, str]) -> None:
    rng = random.Random(5)
    a = rng.randbytes(2 * MIB)
    files = {"/t/a": a, "/t/a.dtune-part": rng.randbytes(2 * MIB), "/t/.dtune/x": b"planted\n"}
    with FakeServer(files) as fake:
        # a journal that claims all of a: on the old layout it would have been resumed as a's
        files["/t/a.dtune-journal"] = fake.files["/t/a.dtune-journal"] = journal_text(
            {"url": fake.url("/t/a"), "size": len(a)}, (0, len(a))).encode()
        out = tmp_path / "out"
        first = run_get(env, [fake.url("/t/")], out, *SMALL)
        again = run_get(env, [fake.url("/t/")], out, *SMALL)
    # the refused entry costs that entry only, as every unsafe name does: a warning names it, and
    # every file the listing could deliver is there and verified
    assert first.code == 0, first.stderr
    refused = [w for w in warnings(first) if w.startswith("refusing '.dtune")]
    assert len(refused) == 1 and "state directory" in refused[0], warnings(first)
    assert first.summary["files_verified"] == 3, first.summary
    got = tree(out)
    for name in ("a", "a.dtune-part", "a.dtune-journal"):
        assert got[name] == files["/t/" + name], f"{name}: wrong bytes"
    assert not (out / ".dtune").exists(), got.keys()   # x never written; the empty state directory went
    assert again.code == 0 and tree(out) == got


def test_a_journal_of_another_source_is_set_aside_and_the_file_restarts_with_a_note(
        tmp_path: Path, env: dict[str, str]) -> None:
    rng = random.Random(6)
    data = rng.randbytes(3 * MIB)
    files = {"/d/f.bin": data, "/other/f.bin": rng.randbytes(3 * MIB)}
    out = tmp_path / "out"
    with FakeServer(files) as fake:
        # a run of /other/f.bin into the same name, killed halfway: its bytes must not be stitched in
        p = plant(out, "f.bin", files["/other/f.bin"][:MIB] + bytes(2 * MIB),
                  journal_text({"v": 2, "url": fake.url("/other/f.bin"), "size": len(data)}, (0, MIB)))
        outcome = run_get(env, [fake.url("/d/f.bin")], out, *SMALL)
        asked = sum(e - s for s, e in fake.asked("/d/f.bin"))
    assert outcome.code == 0, outcome.stderr
    assert (out / "f.bin").read_bytes() == data
    assert asked == len(data)                      # restarted: every byte asked for
    notes = [w for w in warnings(outcome) if "set aside" in w]
    assert len(notes) == 1 and "f.bin" in notes[0] and "another source" in notes[0], warnings(outcome)
    aside = sorted(os.listdir(out / ".dtune" / "aside"))
    assert [n.rsplit(".", 1)[1] for n in aside] == ["journal", "part"], aside   # kept, not deleted
    assert not os.path.exists(p.part) and not os.path.exists(p.journal)


def test_wrong_typed_journals_in_a_url_list_run_cost_only_their_files_a_restart(
        tmp_path: Path, env: dict[str, str]) -> None:
    rng = random.Random(7)
    files = {f"/u/{n}.bin": rng.randbytes(MIB + n) for n in range(4)}
    out = tmp_path / "out"
    with FakeServer(files) as fake:
        bad = [{"url": fake.url("/u/0.bin"), "size": str(MIB)},            # size as text
               {"url": 5, "size": MIB + 1},                                # url a number
               {"url": fake.url("/u/2.bin"), "size": MIB + 2, "etag": []}]  # a list for a validator
        for n, header in enumerate(bad):
            plant(out, f"{n}.bin", bytes(MIB + n), journal_text(header, (0, MIB)))
        plant(out, "3.bin", b"\xff" * 10, "dtune-journal 1 {\"size\": 1\n\x00garbage\n")   # not JSON
        urls = tmp_path / "urls.txt"
        urls.write_text("".join(fake.url(p) + "\n" for p in files))
        outcome = run_get(env, ["-i", str(urls)], out, *SMALL)
    assert outcome.code == 0, outcome.stderr
    for path, data in files.items():
        assert (out / path.removeprefix("/u/")).read_bytes() == data
    notes = [w for w in warnings(outcome) if "set aside" in w]
    assert sorted(w.split(":")[0] for w in notes) == ["0.bin", "1.bin", "2.bin", "3.bin"], notes


def test_an_older_dtunes_partial_download_is_adopted_and_finished(tmp_path: Path, env: dict[str, str]) -> None:
    rng = random.Random(8)
    data = rng.randbytes(4 * MIB)
    half = 2 * MIB
    out = tmp_path / "out"
    out.mkdir()
    with FakeServer({"/o/old.bin": data, "/o/alien.bin": data}) as fake:
        (out / "old.bin.dtune-part").write_bytes(data[:half] + bytes(len(data) - half))
        header = {"url": fake.url("/o/old.bin"), "size": len(data), "sha256": None, "etag": None}
        (out / "old.bin.dtune-journal").write_text(journal_text(header, (0, half)))
        # an old pair of another source: not resumed, left in place, the user told
        (out / "alien.bin.dtune-part").write_bytes(bytes(len(data)))
        (out / "alien.bin.dtune-journal").write_text(journal_text({**header, "url": fake.url("/x")}, (0, half)))
        outcome = run_get(env, [fake.url("/o/old.bin"), fake.url("/o/alien.bin")], out, *SMALL)
        asked = sum(e - s for s, e in fake.asked("/o/old.bin"))
    assert outcome.code == 0, outcome.stderr
    assert (out / "old.bin").read_bytes() == data and (out / "alien.bin").read_bytes() == data
    assert asked == len(data) - half                 # adopted: only the missing half was asked for
    assert not (out / "old.bin.dtune-part").exists() and not (out / "old.bin.dtune-journal").exists()
    notes = [w for w in warnings(outcome) if "older dtune" in w]
    assert len(notes) == 1 and "alien.bin: alien.bin.dtune-part (it was written for another source" in notes[0], notes
    assert "old.bin" not in notes[0]
    assert (out / "alien.bin.dtune-part").exists()   # never dtune's to delete unasked
    assert not (out / ".dtune").exists()


def test_a_symlink_planted_at_the_state_directory_is_refused_not_followed(tmp_path: Path, env: dict[str, str]) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / ".dtune").symlink_to(elsewhere)
    with FakeServer({"/s/f.bin": random.Random(9).randbytes(MIB)}) as fake:
        outcome = run_get(env, [fake.url("/s/f.bin")], out, *SMALL)
    assert outcome.code == 1, outcome.stderr
    assert "symlink" in json.dumps(outcome.summary["failed"]), outcome.summary["failed"]
    assert list(elsewhere.iterdir()) == [] and not (out / "f.bin").exists()
