"""History URLs: PostgreSQL's driver, the message when it is missing, and passwords never shown."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.harness import child_env

from dtune.config import hide_url_password
from dtune.errors import DtuneError
from dtune.history import open_store, resolve_url

SECRET = "s3cr3t-Pw"


@pytest.fixture(autouse=True)
def _no_home(tmp_path, monkeypatch):
    monkeypatch.delenv("DTUNE_HISTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.mark.parametrize("url, driver", [
    ("postgresql://u@h/db", "postgresql+psycopg"),
    ("postgres://u@h/db", "postgresql+psycopg"),
    ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2"),    # an explicit driver is kept
    ("postgres+pg8000://u@h/db", "postgresql+pg8000"),
    ("sqlite:///x.db", "sqlite"),
])
def test_postgresql_urls_get_psycopg3_when_it_is_installed(url, driver):
    pytest.importorskip("psycopg")
    assert resolve_url(url).drivername == driver


def test_without_psycopg_a_postgresql_url_is_one_line_saying_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)      # `import psycopg` raises ImportError
    for url in (f"postgresql://u:{SECRET}@127.0.0.1:1/db", f"postgresql+psycopg://u:{SECRET}@127.0.0.1:1/db"):
        with pytest.raises(DtuneError) as info:
            open_store(url)
        text = str(info.value)
        assert "the driver for this database is not installed: pip install 'psycopg[binary]'" in text
        assert text.startswith("history postgresql") and "u:***@127.0.0.1:1/db" in text
        assert SECRET not in text and "\n" not in text


def test_a_malformed_url_is_one_line_without_its_password():
    with pytest.raises(DtuneError, match="is not a database URL") as info:
        open_store(f"postgresql://u:{SECRET}@h:notaport/db")
    assert SECRET not in str(info.value) and "'postgresql://u:***@h:notaport/db'" in str(info.value)


def test_a_refused_connection_is_one_line_without_the_password():
    pytest.importorskip("psycopg")
    with pytest.raises(DtuneError) as info:
        open_store(f"postgresql://u:{SECRET}@127.0.0.1:1/db")      # nothing listens on port 1
    text = str(info.value)
    assert text.startswith("history postgresql+psycopg://u:***@127.0.0.1:1/db: prepare the tables: ")
    assert SECRET not in text and "\n" not in text


@pytest.mark.parametrize("text, shown", [
    (f"postgresql://u:{SECRET}@h:5432/db", "postgresql://u:***@h:5432/db"),
    (f"postgresql://u:{SECRET}/x@h/db", "postgresql://u:***@h/db"),        # a '/' in the password
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("sqlite:////data/a@b:c.db", "sqlite:////data/a@b:c.db"),
    ("/plain/path.db", "/plain/path.db"),
])
def test_hide_url_password(text, shown):
    assert hide_url_password(text) == shown


def test_config_show_and_history_commands_never_print_the_password(tmp_path):
    url = f"postgresql://u:{SECRET}@127.0.0.1:1/db"
    env = child_env(tmp_path, DTUNE_HISTORY=url)
    shown = subprocess.run([sys.executable, "-m", "dtune", "config", "show"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "postgresql://u:***@127.0.0.1:1/db" in shown.stdout and SECRET not in shown.stdout + shown.stderr
    for args in (["history", "list"], ["history", "show", "1"], ["history", "export", "--csv", "-"],
                 ["model", "build", "--out", str(tmp_path / "m.json")]):
        done = subprocess.run([sys.executable, "-m", "dtune", *args], capture_output=True, text=True, env=env,
                              timeout=60)
        assert done.returncode == 1 and "Traceback" not in done.stderr, (args, done.stderr)
        assert "u:***@127.0.0.1:1/db" in done.stderr and SECRET not in done.stdout + done.stderr, args
