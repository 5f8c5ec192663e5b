"""The selection and sync options of ``dtune get`` reach the plan (flags, environment, config file)."""

from __future__ import annotations

import pytest

from dtune.config import resolve
from dtune.errors import UsageError
from dtune.options import OPTIONS
from dtune.transfer import request_from


def _plan(given: dict, environ: dict | None = None):
    values = resolve(OPTIONS, given=given, environ=environ or {}, use_config=False)
    return request_from(["http://h/d/"], "out", values, environ={})


def test_selection_and_sync_options_land_in_the_plan_and_default_to_everything() -> None:
    plan = _plan({"include": ["*.nc", "dir/**"], "exclude": ["tmp/"], "max_depth": 3, "max_files": 5,
                  "dry_run": True, "update": True})
    assert plan.include == ["*.nc", "dir/**"] and plan.exclude == ["tmp/"]
    assert plan.max_depth == 3 and plan.max_files == 5 and plan.dry_run and plan.options.update
    sel = plan.selection()
    assert sel.wants_file("dir/x/y.txt") and not sel.wants_file("tmp/a.nc") and not sel.descends("tmp", 1)
    default = _plan({})
    assert default.selection().everything and not default.dry_run and not default.options.update
    assert plan.record()["include"] == ["*.nc", "dir/**"]  # what the history keeps


def test_the_environment_gives_one_pattern_per_line() -> None:
    plan = _plan({}, {"DTUNE_EXCLUDE": "*.tmp\ncache/", "DTUNE_MAX_DEPTH": "2"})
    assert plan.exclude == ["*.tmp", "cache/"] and plan.max_depth == 2


def test_a_pattern_that_names_nothing_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--include/--exclude: pattern '/' names nothing"):
        _plan({"exclude": ["/"]})


def test_verify_existing_and_allow_insecure_redirect_reach_the_engine_and_the_access_off_by_default() -> None:
    plan = _plan({"verify_existing": True, "allow_insecure_redirect": True})
    assert plan.options.verify_existing and plan.access.allow_insecure_redirect
    default = _plan({})
    assert not default.options.verify_existing and not default.access.allow_insecure_redirect
    from_env = _plan({}, {"DTUNE_VERIFY_EXISTING": "1", "DTUNE_ALLOW_INSECURE_REDIRECT": "1"})
    assert from_env.options.verify_existing and from_env.access.allow_insecure_redirect
