"""The option registry: one row gives the flag, the variable, the config key and the keyword."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dtune import argtypes
from dtune.config import Option, add_arguments, config_path, resolve, show
from dtune.errors import UsageError
from dtune.options import GROUPS, OPTIONS
from dtune.transfer import request_from

ROWS = [
    Option(("--retries",), "retries", "g", default=5, parse=argtypes.count, metavar="N"),
    Option(("--speed-limit", "--lowest-speed-limit"), "floor", "g", default=1024, parse=argtypes.byte_rate),
    Option(("--mirror",), "mirrors", "g", kind="list"),
    Option(("--online",), "search", "g", kind="switch"),
    Option(("--json",), "events", "g", kind="flag"),
    Option(("--header",), "headers", "g", kind="list", secret=True),
]


def parse(argv: list[str]) -> dict:
    p = argparse.ArgumentParser()
    add_arguments(p, ROWS, {"g": "group"})
    return vars(p.parse_args(argv))


def test_names_variables_and_keys_derive_from_the_first_long_flag() -> None:
    row = ROWS[1]
    assert (row.key, row.name, row.env_var) == ("speed-limit", "speed_limit", "DTUNE_SPEED_LIMIT")


def test_a_flag_not_given_is_absent_so_the_lower_layers_show_through(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('retries = 9\nspeed-limit = "2K"\nmirror = ["http://b/"]\n')
    values = resolve(ROWS, given=parse([]), environ={}, config=cfg)
    assert values["retries"].value == 9 and values["retries"].origin == f"config file {cfg}"
    assert values["speed_limit"].value == 2048
    assert values["mirror"].value == ["http://b/"]
    assert values["json"].value is False and values["json"].origin == "default"


def test_the_command_line_beats_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("retries = 9\n[get]\nonline = false\n")
    env = {"DTUNE_RETRIES": "3", "DTUNE_ONLINE": "yes"}
    values = resolve(ROWS, given=parse([]), environ=env, config=cfg)
    assert (values["retries"].value, values["retries"].origin) == (3, "environment DTUNE_RETRIES")
    assert values["online"].value is True
    values = resolve(ROWS, given=parse(["--retries", "1", "--no-online"]), environ=env, config=cfg)
    assert (values["retries"].value, values["retries"].origin) == (1, "command line")
    assert values["online"].value is False


def test_python_keywords_are_converted_like_text() -> None:
    values = resolve(ROWS, given={"speed_limit": "4K", "retries": 2, "mirror": ["u"]},
                     given_origin="argument", environ={}, use_config=False)
    assert values["speed_limit"].value == 4096 and values["retries"].value == 2
    assert values["retries"].origin == "argument"
    with pytest.raises(UsageError, match="unknown option 'retry'"):
        resolve(ROWS, given={"retry": 2}, given_origin="argument", environ={}, use_config=False)


@pytest.mark.parametrize(("text", "message"), [
    ("retries = 'x'\n", "config file .*: retries: 'x' is not an integer"),
    ("retrys = 2\n", "unknown key 'retrys'"),
    ("retries = [\n", "not valid TOML"),
    ("json = 'maybe'\n", "not a boolean"),
    ("retries = true\n", "not a valid value for --retries"),
])
def test_a_bad_config_file_names_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    with pytest.raises(UsageError, match=message):
        resolve(ROWS, environ={}, config=cfg)


def test_a_bad_variable_names_the_variable() -> None:
    with pytest.raises(UsageError, match="DTUNE_RETRIES: 'many' is not an integer"):
        resolve(ROWS, environ={"DTUNE_RETRIES": "many"}, use_config=False)


def test_a_list_variable_holds_one_value_per_line() -> None:
    values = resolve(ROWS, environ={"DTUNE_MIRROR": "http://a/\nhttp://b/\n"}, use_config=False)
    assert values["mirror"].value == ["http://a/", "http://b/"]


def test_the_config_file_is_found_where_the_environment_says() -> None:
    assert config_path({"DTUNE_CONFIG": "/x/c.toml"}) == Path("/x/c.toml")
    assert config_path({"XDG_CONFIG_HOME": "/cfg"}) == Path("/cfg/dtune/config.toml")
    assert config_path({"HOME": "/h"}).name == "config.toml"


def test_a_config_file_named_by_the_environment_must_exist(tmp_path: Path) -> None:
    env = {"DTUNE_CONFIG": str(tmp_path / "nope.toml")}
    with pytest.raises(UsageError, match="no such file"):
        resolve(ROWS, environ=env)
    assert resolve(ROWS, environ={}, config=tmp_path / "absent.toml")["retries"].value == 5


def test_show_masks_secrets_but_names_the_header() -> None:
    values = resolve(ROWS, given={"header": ["Authorization: Bearer abc"]}, given_origin="argument",
                     environ={}, use_config=False)
    rows = {key: text for key, text, _ in show(ROWS, values)}
    assert rows["header"] == "Authorization: ***" and "abc" not in str(rows)


def test_every_get_option_has_a_known_group_a_unique_name_and_a_parsable_default() -> None:
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    assert all(o.group in GROUPS for o in OPTIONS)
    for o in OPTIONS:
        if o.kind == "value" and o.default is not None:
            assert o.convert(str(o.default), o.key) == o.default, o.key


def test_the_default_plan_is_what_dtune_get_did_before_the_table(tmp_path: Path) -> None:
    plan = request_from(["http://h/x"], str(tmp_path), resolve(OPTIONS, environ={}, use_config=False))
    assert (plan.tuner, plan.max_cc, plan.partitions, plan.max_per_host) == ("auto", 16, 2, 64)
    assert plan.options.retries == 5 and plan.options.speed_limit == 1024
    assert plan.cc is None and plan.p is None and plan.mirrors == []
