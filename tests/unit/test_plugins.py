"""dtune.plugins: the lab's commands come through entry points; without the lab they say where they come from."""
from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from dtune import cli, plugins

SRC = Path(cli.__file__).resolve().parent


class FakeEntryPoint:
    """What ``importlib.metadata`` gives: a name, and ``load()`` the function it names."""

    def __init__(self, name: str, function) -> None:  # noqa: ANN001
        self.name, self.function, self.loaded = name, function, False

    def load(self):  # noqa: ANN201
        self.loaded = True
        return self.function


def _installed(monkeypatch, commands: dict | None = None, history: dict | None = None) -> None:
    groups = {plugins.COMMANDS_GROUP: commands or {}, plugins.HISTORY_GROUP: history or {}}
    monkeypatch.setattr(plugins, "entry_points", lambda group: groups[group])


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a.dest for a in sub._choices_actions]


def test_dtune_imports_nothing_of_the_lab() -> None:
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if node.value.startswith("dtune_lab") else []
            else:
                continue
            assert not any(n.split(".")[0] == "dtune_lab" for n in names), f"{path}: {names}"


@pytest.mark.parametrize("argv", [["demo"], ["demo", "--help"], ["bench", "s.toml", "--out", "d"],
                                  ["testbed", "up", "s.toml"], ["dataset", "make", "html", "x"]])
def test_a_lab_command_without_the_lab_says_how_to_get_it(monkeypatch, capsys, argv) -> None:
    _installed(monkeypatch)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == (f"dtune: error: `dtune {argv[0]}` comes with dtune's lab, a separate package that is "
                   f"not installed: pip install -e ./lab (in dtune's source tree)\n")


def test_history_sweep_without_the_lab_says_how_to_get_it(monkeypatch, capsys) -> None:
    _installed(monkeypatch)
    assert cli.main(["history", "sweep", "--dry-run", "s.toml"]) == 2
    assert "`dtune history sweep` comes with dtune's lab" in capsys.readouterr().err


def test_the_help_without_the_lab_lists_its_commands_and_how_to_get_them(monkeypatch) -> None:
    _installed(monkeypatch)
    parser = cli.build_parser()
    assert _choices(parser) == [*cli.COMMANDS, *plugins.LAB_COMMANDS]
    text = " ".join(parser.format_help().split())
    for name, help_ in plugins.LAB_COMMANDS.items():
        assert f"{name} {help_} [lab, not installed: pip install -e ./lab]" in text


def test_an_installed_command_is_the_only_one_loaded_when_asked_for(monkeypatch, capsys) -> None:
    def register(sub: argparse._SubParsersAction) -> None:
        sub.add_parser("hello", help="say hello").set_defaults(func=lambda args: print("hello") or 0)

    hello, other = FakeEntryPoint("hello", register), FakeEntryPoint("other", lambda sub: None)
    _installed(monkeypatch, commands={"hello": hello, "other": other})
    assert _choices(cli.build_parser("hello")) == ["hello"]
    assert not other.loaded
    assert cli.main(["hello"]) == 0 and capsys.readouterr().out == "hello\n"


def test_an_installed_history_action_gets_the_history_options(monkeypatch, capsys) -> None:
    def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
        p = sub.add_parser("sweep", parents=parents)
        p.set_defaults(func=lambda args: print(f"sweep into {args.history}") or 0)

    _installed(monkeypatch, history={"sweep": FakeEntryPoint("sweep", register)})
    assert cli.main(["history", "sweep", "--history", "h.db"]) == 0
    assert capsys.readouterr().out == "sweep into h.db\n"


def test_a_command_of_dtune_reads_no_entry_points(monkeypatch) -> None:
    def fail(group: str) -> dict:
        raise AssertionError(f"read {group}")

    monkeypatch.setattr(plugins, "entry_points", fail)
    assert _choices(cli.build_parser("get")) == ["get"]


def test_the_lab_installed_gives_its_own_commands() -> None:
    pytest.importorskip("dtune_lab")
    found = plugins.entry_points(plugins.COMMANDS_GROUP)
    assert list(found)[:len(plugins.LAB_COMMANDS)] == list(plugins.LAB_COMMANDS)
    assert "sweep" in plugins.entry_points(plugins.HISTORY_GROUP)
    assert _choices(cli.build_parser("bench")) == ["bench"]
    text = cli.build_parser().format_help()
    assert "not installed" not in text and "bench" in text
