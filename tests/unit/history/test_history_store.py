"""HistoryStore on a real SQLite file: record/list/get, samples, rows(), URL resolution."""

from __future__ import annotations

import pytest
from support.history import make_record

from dtune.errors import DtuneError
from dtune.history import default_url, open_store, resolve_url


@pytest.fixture(autouse=True)
def _no_home(tmp_path, monkeypatch):
    """Never touch the real ~/.local/share: the default location lives in tmp_path."""
    monkeypatch.delenv("DTUNE_HISTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def test_record_then_get_returns_the_same_row_with_its_id(tmp_path):
    with open_store(str(tmp_path / "h.db")) as store:
        rid = store.record(make_record(), [])
        got = store.get(rid)
    assert got == make_record(id=rid)


def test_list_is_newest_first_with_limit_and_offset(tmp_path):
    with open_store(str(tmp_path / "h.db")) as store:
        ids = [store.record(make_record(cc=i + 1), []) for i in range(5)]
        assert [r.id for r in store.list(limit=2)] == ids[::-1][:2]
        assert [r.id for r in store.list(limit=2, offset=2)] == ids[::-1][2:4]
        assert store.count() == 5
        assert store.get(999) is None


def test_samples_keep_time_order_and_params(tmp_path):
    samples = [{"t": 2.0, "bytes": 300, "rate_mbps": 1.5, "params": {"all": {"cc": 4, "p": 1, "pp": 2}}},
               {"t": 1.0, "bytes": 100, "rate_mbps": 0.8, "params": {"all": {"cc": 2, "p": 1, "pp": 2}}}]
    with open_store(str(tmp_path / "h.db")) as store:
        rid = store.record(make_record(), samples)
        other = store.record(make_record(), samples[:1])
        assert store.samples(rid) == sorted(samples, key=lambda s: s["t"])
        assert len(store.samples(other)) == 1


def test_rows_yields_dicts_oldest_first_with_chosen_columns_and_origin(tmp_path):
    with open_store(str(tmp_path / "h.db")) as store:
        store.record(make_record(cc=1), [])
        store.record(make_record(cc=2, origin="import", params_json=None), [])
        store.record(make_record(cc=3, origin="sweep"), [])
        everything = list(store.rows())
        assert [r["cc"] for r in everything] == [1, 2, 3]
        assert everything[1]["params_json"] is None
        assert list(store.rows(["cc", "throughput_mbps"], origin="import")) == [
            {"cc": 2, "throughput_mbps": 812.5}]
        with pytest.raises(ValueError, match="nope"):
            list(store.rows(["nope"]))


def test_record_refuses_words_outside_the_vocabulary(tmp_path):
    with open_store(str(tmp_path / "h.db")) as store:
        for bad in ({"origin": "manual"}, {"energy_kind": "guessed"}, {"rtt_how": "made up"}, {"cc": -1}):
            with pytest.raises(ValueError):
                store.record(make_record(**bad), [])
        assert store.count() == 0


def test_default_url_follows_xdg_data_home(tmp_path, monkeypatch):
    assert default_url() == f"sqlite:///{tmp_path / 'xdg' / 'dtune' / 'history.db'}"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")     # ignored, as the XDG spec says
    assert default_url().endswith("/.local/share/dtune/history.db")


def test_default_store_is_created_under_xdg_data_home(tmp_path):
    with open_store() as store:
        store.record(make_record(), [])
    assert (tmp_path / "xdg" / "dtune" / "history.db").is_file()


def test_dtune_history_env_is_used_when_no_url_is_given(tmp_path, monkeypatch):
    target = tmp_path / "env" / "from-env.db"
    monkeypatch.setenv("DTUNE_HISTORY", f"sqlite:///{target}")
    with open_store() as store:
        store.record(make_record(), [])
    assert target.is_file()
    assert not (tmp_path / "xdg").exists()
    explicit = tmp_path / "explicit.db"
    with open_store(str(explicit)) as store:   # an explicit URL beats the environment
        assert store.count() == 0
    assert explicit.is_file()


def test_tilde_in_a_sqlite_url_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    url = resolve_url("sqlite:///~/sub/h.db")
    assert url.database == str(tmp_path / "sub" / "h.db")
    with open_store("sqlite:///~/sub/h.db") as store:
        assert store.count() == 0
    assert (tmp_path / "sub" / "h.db").is_file()


def test_bad_urls_are_one_line_dtune_errors(tmp_path):
    with pytest.raises(DtuneError, match="not a database URL"):
        open_store("not a url://x")
    with pytest.raises(DtuneError, match="history"):
        open_store("nosuchdialect://user:secret@host/db")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DtuneError, match="cannot create") as info:
        open_store(str(tmp_path / "file" / "h.db"))
    assert "\n" not in str(info.value)


def test_password_is_hidden_in_the_store_name(tmp_path):
    url = resolve_url("postgresql://me:secret@db.example/history")
    from dtune.history.store import describe
    assert "secret" not in describe(url)


def test_a_missing_json_value_is_sql_null_not_the_text_null(tmp_path):
    import sqlalchemy as sa

    from dtune.history.schema import transfers
    with open_store(str(tmp_path / "h.db")) as store:
        store.record(make_record(params_json=None, tuner_settings=None), [])
        with store.engine.connect() as conn:
            query = sa.select(sa.func.count()).select_from(transfers).where(transfers.c.params_json.is_(None))
            assert conn.execute(query).scalar_one() == 1


def test_deleting_a_transfer_deletes_its_samples(tmp_path):
    import sqlalchemy as sa

    from dtune.history.schema import samples, transfers
    with open_store(str(tmp_path / "h.db")) as store:
        rid = store.record(make_record(), [{"t": 1.0, "bytes": 1, "rate_mbps": 0.0, "params": None}])
        with store.engine.begin() as conn:
            conn.execute(sa.delete(transfers).where(transfers.c.id == rid))
        with store.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(samples)).scalar_one() == 0
