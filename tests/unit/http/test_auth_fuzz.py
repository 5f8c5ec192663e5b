"""Property tests of the credential files dtune reads: ``.netrc`` (``parse_netrc``, ``NetrcAuth``)
and the AWS shared config and credentials files (``awsconfig``). Random files never crash (a
``NetrcError`` / ``UsageError`` at most, naming a line or the file and never quoting a secret),
and never give one host's credentials to another."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.errors import UsageError
from dtune.http import awsconfig
from dtune.http.auth import NetrcAuth, NetrcError, basic_auth, parse_netrc
from dtune.http.message import Origin

pytestmark = pytest.mark.fuzz
HOSTS = ["a.example", "b.example", "A.EXAMPLE", "127.0.0.1", "::1", "a.example.evil", "example"]
WORDS = st.one_of(st.sampled_from(["machine", "default", "login", "password", "account", "macdef", "#", "# c",
                                   '"', '"q w"', '"\\"', "\\", "\n", "\n\n", " ", "\t", "m", "SECRET",
                                   *HOSTS]), st.text(max_size=8))
netrc_texts = st.one_of(st.text(max_size=300), st.lists(WORDS, max_size=30).map(" ".join),
                        st.lists(WORDS, max_size=30).map("".join))


@FUZZ
@given(text=netrc_texts, host=st.sampled_from(HOSTS))
def test_a_random_netrc_gives_entries_or_a_netrc_error_and_credentials_only_for_their_host(text: str,
                                                                                          host: str) -> None:
    try:
        entries = parse_netrc(text)
    except NetrcError as exc:
        assert str(exc).startswith(f"line {exc.line}: ") and 1 <= exc.line <= text.count("\n") + 1
        assert "SECRET" not in str(exc)
        return
    got = NetrcAuth(entries).headers("GET", Origin("https", host, 443), "/", False)
    if got is None:
        return
    allowed = {basic_auth(e.login, e.password) for e in entries
               if (e.host == host.lower() or e.host is None) and e.login is not None and e.password is not None}
    assert got["Authorization"] in allowed
    named = [e for e in entries if e.host == host.lower()]
    if named:  # a host's own entry wins over default
        assert named[0].login is not None and named[0].password is not None
        assert got["Authorization"] == basic_auth(named[0].login, named[0].password)


@FUZZ
@given(mine=st.sampled_from(HOSTS), other=st.sampled_from(HOSTS), login=st.text(max_size=10),
       password=st.text(max_size=10))
def test_a_machine_entry_is_never_sent_to_another_host(mine: str, other: str, login: str, password: str) -> None:
    text = f'machine {mine} login "{login}" password "{password}"\n'
    try:
        entries = parse_netrc(text)
    except NetrcError:
        return
    got = NetrcAuth(entries).headers("GET", Origin("https", other, 443), "/", False)
    if other.lower() != mine.lower():
        assert got is None


INI_PIECES = st.sampled_from([
    "[default]", "[profile p]", "[p]", "[", "]", "[profile default]", "[\x00none]", "aws_access_key_id",
    "aws_secret_access_key", "aws_session_token", "region", "role_arn", "credential_process", "=", ":", " = ",
    "AKIA", "SECRET", "us-east-1", "%(x)s", "%", "\n", "\n", "\n  ", "\t", "#", ";", "\ufeff", "\x00", "é"])
ini_texts = st.one_of(st.text(max_size=200), st.lists(INI_PIECES, max_size=40).map("".join))


@FUZZ
@given(config=ini_texts, creds=ini_texts, profile=st.sampled_from(["", "default", "p", "missing"]))
@example(config="", creds="SECRET", profile="")
@example(config="[default]\nSECRET\n", creds="", profile="")
def test_random_aws_files_give_credentials_a_region_or_a_usage_error(config: str, creds: str,
                                                                     profile: str) -> None:
    box = Path(tempfile.mkdtemp(prefix="dtune-fuzz-aws-"))
    try:
        (box / "config").write_text(config, encoding="utf-8", errors="surrogatepass")
        (box / "credentials").write_text(creds, encoding="utf-8", errors="surrogatepass")
        environ = {"HOME": str(box), "AWS_CONFIG_FILE": str(box / "config"),
                   "AWS_SHARED_CREDENTIALS_FILE": str(box / "credentials")}
        values = {"s3_profile": profile} if profile else {}
        for read in (lambda: awsconfig.credentials(values, environ), lambda: awsconfig.region(values, environ)):
            try:
                got = read()
            except UsageError as exc:
                assert str(box) in str(exc) or "profile" in str(exc)
                assert "SECRET" not in str(exc).replace("aws_secret_access_key", "")
                continue
            assert got is None or got
    finally:
        shutil.rmtree(box, ignore_errors=True)
    assert not os.path.exists(box)
