"""Options declared once: flag, environment variable, config key, default and help from one table.

Each option of ``dtune get`` is one ``Option`` (the table is
``dtune.options.OPTIONS``). From it come:

- the command-line flags, grouped in ``--help`` (``add_arguments``);
- the environment variable, ``DTUNE_`` + the key in upper case with ``_``
  (``--max-connections-per-host`` → ``DTUNE_MAX_CONNECTIONS_PER_HOST``);
- the key in the config file, the long flag without its dashes
  (``max-connections-per-host = 8``), read from ``$DTUNE_CONFIG``, else
  ``$XDG_CONFIG_HOME/dtune/config.toml``, else ``~/.config/dtune/config.toml``;
- the keyword of the Python API, the key with ``_`` (``dtune.get(...,
  max_connections_per_host=8)``).

Later layers win: default < config file < environment < command line (or the
Python call). ``resolve`` returns every value with where it came from, which
``dtune config show`` prints. Every layer's text goes through the option's
``parse``, so ``"1K"`` means the same in a flag, a variable and the file, and a
bad value names its layer: ``DTUNE_RETRIES: 'x' is not an integer``.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtune.errors import UsageError

ENV_PREFIX = "DTUNE_"


@dataclass(frozen=True, slots=True)
class Option:
    """One option. ``kind``: "value" (one value), "flag" (on when given), "switch"
    (``--x``/``--no-x``), "list" (repeatable; the file takes a TOML array and the
    environment one value per line)."""

    flags: tuple[str, ...]
    help: str
    group: str
    default: Any = None
    parse: Callable[[str], Any] | None = None  # text → value (raises ValueError/ArgumentTypeError)
    kind: str = "value"
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    secret: bool = False       # `config show` prints that it is set, never the value
    env: bool = True           # read from DTUNE_<KEY> (off where the variable would hold a secret the
                               # user should point to instead, or where a name is already taken)

    @property
    def key(self) -> str:
        """The config-file key: the first long flag without ``--``."""
        return next(f for f in self.flags if f.startswith("--"))[2:]

    @property
    def name(self) -> str:
        """The Python keyword and ``argparse`` dest."""
        return self.key.replace("-", "_")

    @property
    def env_var(self) -> str | None:
        return ENV_PREFIX + self.name.upper() if self.env else None

    def convert(self, value: Any, where: str) -> Any:
        """``value`` from a layer (text, or a TOML / Python value) as this option's value."""
        try:
            if self.kind in ("flag", "switch"):
                return _boolean(value)
            if self.kind == "list":
                items = value.splitlines() if isinstance(value, str) else value
                if not isinstance(items, (list, tuple)):
                    raise ValueError(f"must be a list, got {value!r}")
                return [self._one(item) for item in items if not (isinstance(item, str) and not item.strip())]
            return self._one(value)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
            raise UsageError(f"{where}: {exc}") from None

    def _one(self, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"{value!r} is not a valid value for {self.flags[0]}")
        text = str(value)
        if self.choices is not None and text not in self.choices:
            raise ValueError(f"{text!r} is not one of {', '.join(self.choices)}")
        return self.parse(text) if self.parse is not None else text


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{value!r} is not a boolean (true/false, 1/0, yes/no)")


def add_arguments(parser: argparse.ArgumentParser, options: Iterable[Option],
                  groups: Mapping[str, str]) -> None:
    """Add each option's flags to ``parser``, in ``groups`` (name → title) order. Nothing has an
    argparse default: a flag not given is absent from the namespace, so ``resolve`` can tell."""
    made = {name: parser.add_argument_group(title) for name, title in groups.items()}
    for opt in options:
        group = made[opt.group]
        extra: dict[str, Any] = {"dest": opt.name, "default": argparse.SUPPRESS,
                                 "help": opt.help.replace("%", "%%") + _default_text(opt)}
        if opt.kind == "flag":
            group.add_argument(*opt.flags, action="store_true", **extra)
        elif opt.kind == "switch":
            group.add_argument(*opt.flags, action=argparse.BooleanOptionalAction, **extra)
        else:
            group.add_argument(*opt.flags, type=_argtype(opt), metavar=opt.metavar or "VALUE",
                               action="append" if opt.kind == "list" else "store",
                               choices=opt.choices, **extra)


def _argtype(opt: Option) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return opt.parse(text) if opt.parse is not None else text
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = opt.key  # argparse names the flag in its message
    return convert


def _default_text(opt: Option) -> str:
    if opt.kind in ("flag", "list") or opt.default is None or "default" in opt.help:
        return ""
    if opt.kind == "switch":
        return f" (default: {'on' if opt.default else 'off'})"
    return f" (default {opt.default:g})" if isinstance(opt.default, float) else f" (default {opt.default})"


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the config file is looked for."""
    env = os.environ if environ is None else environ
    if env.get("DTUNE_CONFIG"):
        return Path(env["DTUNE_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "dtune" / "config.toml"


def read_config(path: Path, options: Iterable[Option], *, required: bool = False,
                table: str = "get") -> dict[str, Any]:
    """The config file's keys for these options (a missing file is empty unless ``required``).
    Keys of other commands live in their own table (``[serve]``): the top level and ``[get]``
    hold ``dtune get``'s; ``table`` names one more that overrides them (``dtune put``'s ``[put]``)."""
    try:
        with path.open("rb") as f:
            text = f.read()
    except FileNotFoundError:
        if required:
            raise UsageError(f"config file {path}: no such file (from DTUNE_CONFIG)") from None
        return {}
    except OSError as exc:
        raise UsageError(f"config file {path}: {exc.strerror or exc}") from None
    import tomllib  # (only once a file is there: its import is start-up time)

    try:
        data = tomllib.loads(text.decode())
    except UnicodeDecodeError as exc:
        raise UsageError(f"config file {path}: not valid TOML: not UTF-8 ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path}: not valid TOML: {exc}") from None
    known = {opt.key for opt in options}
    values = {k: v for k, v in data.items() if not isinstance(v, dict)}
    if isinstance(data.get("get"), dict):
        values.update(data["get"])
    if table != "get" and isinstance(data.get(table), dict):
        values.update(data[table])
    unknown = sorted(set(values) - known)
    if unknown:
        raise UsageError(f"config file {path}: unknown key {unknown[0]!r} (keys are the long flags of "
                         f"`dtune get` without their dashes, e.g. retries = 5)")
    return values


@dataclass(frozen=True, slots=True)
class Value:
    """An option's value and where it came from."""
    value: Any
    origin: str   # "default" | "config file PATH" | "environment DTUNE_X" | "command line" | "argument"


def resolve(options: Iterable[Option], *, given: Mapping[str, Any] | None = None, given_origin: str = "command line",
            environ: Mapping[str, str] | None = None, config: Path | None = None,
            use_config: bool = True, table: str = "get") -> dict[str, Value]:
    """Every option's value and where it came from. ``given`` maps names to values already
    parsed (argparse's namespace) or, from Python, values to convert."""
    options = list(options)
    env = os.environ if environ is None else environ
    out = {opt.name: Value(False if opt.kind == "flag" and opt.default is None else opt.default, "default")
           for opt in options}
    if use_config:
        path = config or config_path(env)
        for key, raw in read_config(path, options, required=bool(env.get("DTUNE_CONFIG")), table=table).items():
            opt = next(o for o in options if o.key == key)
            out[opt.name] = Value(opt.convert(raw, f"config file {path}: {key}"), f"config file {path}")
    for opt in options:
        var = opt.env_var
        if var and var in env:
            out[opt.name] = Value(opt.convert(env[var], var), f"environment {var}")
    by_name = {opt.name: opt for opt in options}
    for name, raw in (given or {}).items():
        if name not in by_name:
            raise UsageError(f"unknown option {name!r}")
        value = raw if given_origin == "command line" else by_name[name].convert(raw, name)
        out[name] = Value(value, given_origin)
    return out


def show(options: Iterable[Option], values: Mapping[str, Value]) -> list[tuple[str, str, str]]:
    """(key, value, origin) rows for ``dtune config show``; secrets masked."""
    rows = []
    for opt in options:
        v = values[opt.name]
        if opt.secret and v.value not in (None, [], ""):
            text = _masked(v.value)
        elif isinstance(v.value, list):
            text = ", ".join(map(str, v.value)) or "-"
        else:
            text = "-" if v.value is None else hide_url_password(str(v.value))
        rows.append((opt.key, text, v.origin))
    return rows


def hide_url_password(text: str) -> str:
    """``scheme://user:***@host/...`` for a URL with a password in its userinfo; other text as it is.

    For values that are not secrets themselves but may carry one, such as
    ``--history postgresql://dtune:PASSWORD@db/dtune``.
    """
    # user, then ':', then everything up to the last '@': over-broad rather than showing a password
    # holding '/' or '@' (SQLAlchemy reads a password up to an '@')
    return re.sub(r"^([A-Za-z][\w+.-]*://[^:/@]*):.*@", r"\1:***@", text, count=1, flags=re.S)


def _masked(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(_masked(v) for v in value)
    text = str(value)
    if ":" in text:  # a header: its name is not secret
        return text.split(":", 1)[0] + ": ***"
    return "***"
