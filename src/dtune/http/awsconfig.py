"""Where an S3 transfer's endpoint, region and credentials come from, as the AWS CLI finds them.

Read with ``configparser`` from the environment and the shared files (no
boto3: it is heavy, and only this much of it is needed):

- credentials: ``--no-sign-request`` means none; else ``AWS_ACCESS_KEY_ID`` +
  ``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_SESSION_TOKEN``), unless ``--s3-profile``
  names a profile (an explicit profile wins over the environment, as in the
  AWS CLI); else the profile's keys in ``$AWS_SHARED_CREDENTIALS_FILE``
  (``~/.aws/credentials``, section ``[NAME]``), then in ``$AWS_CONFIG_FILE``
  (``~/.aws/config``, section ``[profile NAME]``, or ``[default]``); else none,
  and requests go unsigned (a public bucket). A profile named by
  ``--s3-profile`` or ``$AWS_PROFILE`` that is in neither file is an error.
- region: ``--s3-region``, ``$AWS_REGION``, ``$AWS_DEFAULT_REGION``, the
  profile's ``region`` in the config file, else ``us-east-1``.
- endpoint: ``--endpoint-url``, ``$AWS_ENDPOINT_URL_S3``, ``$AWS_ENDPOINT_URL``,
  else ``https://s3.REGION.amazonaws.com``.

A profile that gets its credentials some other way (SSO, ``role_arn``,
``credential_process``) is refused with a message saying so, rather than
sending unsigned requests that would be refused less clearly.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from pathlib import Path

from dtune.errors import UsageError
from dtune.http.sigv4 import Credentials

DEFAULT_REGION = "us-east-1"
_OTHER_PROVIDERS = ("role_arn", "credential_process", "sso_session", "sso_start_url", "web_identity_token_file")


def _file(environ: Mapping[str, str], variable: str, default: str) -> Path:
    value = environ.get(variable)
    if value:
        return Path(value).expanduser()
    return (Path(environ["HOME"]) if environ.get("HOME") else Path.home()) / ".aws" / default


def _read_ini(path: Path) -> configparser.RawConfigParser | None:
    """The file parsed, or None when it does not exist; a file that is not INI is a UsageError."""
    parser = configparser.RawConfigParser(strict=False, default_section="\x00none")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as exc:
        raise UsageError(f"{path}: not an AWS config file: {_problem(exc)}") from None
    return parser


def _problem(exc: configparser.Error) -> str:
    """What is wrong with an INI file and on which line, never the line itself: it may hold a
    secret key (configparser's own messages quote it)."""
    if isinstance(exc, configparser.MissingSectionHeaderError):
        return f"line {exc.lineno}: a line before the first [section]"
    if isinstance(exc, configparser.ParsingError) and exc.errors:
        return f"line {exc.errors[0][0]}: neither 'key = value' nor a [section]"
    lineno = getattr(exc, "lineno", None)
    return type(exc).__name__ + (f" at line {lineno}" if lineno else "")


def _config_section(parser: configparser.RawConfigParser | None, profile: str) -> dict[str, str] | None:
    """``[profile NAME]`` of ``~/.aws/config`` (``[default]`` for the default profile)."""
    if parser is None:
        return None
    for name in ((f"profile {profile}", profile) if profile != "default" else ("default", "profile default")):
        if parser.has_section(name):
            return dict(parser.items(name))
    return None


def _section(parser: configparser.RawConfigParser | None, name: str) -> dict[str, str] | None:
    if parser is None or not parser.has_section(name):
        return None
    return dict(parser.items(name))


def profile_name(values: Mapping[str, object], environ: Mapping[str, str]) -> tuple[str, bool]:
    """The profile to read and whether the user named it (``--s3-profile``)."""
    given = values.get("s3_profile")
    if given:
        return str(given), True
    return environ.get("AWS_PROFILE") or "default", False


def region(values: Mapping[str, object], environ: Mapping[str, str]) -> str:
    given = values.get("s3_region") or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if given:
        return str(given).strip()
    profile, _ = profile_name(values, environ)
    section = _config_section(_read_ini(_file(environ, "AWS_CONFIG_FILE", "config")), profile)
    if section and section.get("region", "").strip():
        return section["region"].strip()
    return DEFAULT_REGION


def endpoint(values: Mapping[str, object], environ: Mapping[str, str], region_name: str) -> str:
    given = values.get("endpoint_url") or environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if given:
        return str(given).strip()
    return f"https://s3.{region_name}.amazonaws.com"


def _keys(section: dict[str, str] | None, where: str) -> Credentials | None:
    if not section:
        return None
    key, secret = section.get("aws_access_key_id", "").strip(), section.get("aws_secret_access_key", "").strip()
    if key and secret:
        return Credentials(key, secret, section.get("aws_session_token", "").strip() or None, where)
    if key or secret:
        raise UsageError(f"{where}: has only one of aws_access_key_id and aws_secret_access_key")
    return None


def credentials(values: Mapping[str, object], environ: Mapping[str, str] | None = None) -> Credentials | None:
    """The credentials to sign S3 requests with, or None for unsigned requests (see the module doc)."""
    if values.get("no_sign_request"):
        return None
    environ = os.environ if environ is None else environ
    profile, named = profile_name(values, environ)
    if not named:
        key, secret = environ.get("AWS_ACCESS_KEY_ID", ""), environ.get("AWS_SECRET_ACCESS_KEY", "")
        if key and secret:
            token = environ.get("AWS_SESSION_TOKEN") or environ.get("AWS_SECURITY_TOKEN") or None
            return Credentials(key, secret, token, "environment (AWS_ACCESS_KEY_ID)")
    cred_path = _file(environ, "AWS_SHARED_CREDENTIALS_FILE", "credentials")
    conf_path = _file(environ, "AWS_CONFIG_FILE", "config")
    cred_section = _section(_read_ini(cred_path), profile)
    found = _keys(cred_section, f"{cred_path} [{profile}]")
    if found:
        return found
    conf_section = _config_section(_read_ini(conf_path), profile)
    found = _keys(conf_section, f"{conf_path} [profile {profile}]")
    if found:
        return found
    for section in (cred_section, conf_section):
        other = [name for name in _OTHER_PROVIDERS if section and name in section]
        if other:
            raise UsageError(f"S3 profile {profile!r} gets its credentials through {other[0]}, which dtune "
                             "does not support; export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                             "(e.g. from `aws configure export-credentials`), or use --no-sign-request")
    if cred_section is None and conf_section is None and (named or environ.get("AWS_PROFILE")):
        given = f"--s3-profile {profile}" if named else f"AWS_PROFILE={profile}"
        raise UsageError(f"{given}: no such profile in {cred_path} or {conf_path}")
    return None
