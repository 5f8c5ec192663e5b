"""``--cluster`` / ``--workers`` in the option table and the plan (``dtune.options``)."""

from __future__ import annotations

import pytest

from dtune.config import resolve
from dtune.errors import UsageError
from dtune.options import OPTIONS
from dtune.transfer import request_from


def plan_of(**given):
    return request_from(["http://127.0.0.1:1/d/"], "out", resolve(OPTIONS, given=given, given_origin="argument",
                                                              environ={}, use_config=False), environ={})


def test_the_plan_carries_the_cluster_and_what_workers_build_their_plan_from():
    plan = plan_of(cluster="tcp://10.0.0.1:8786", retries=3)
    assert plan.cluster == "tcp://10.0.0.1:8786" and plan.workers is None
    assert plan.given["values"]["retries"] == 3 and plan.given["sources"] == ["http://127.0.0.1:1/d/"]
    assert "given" not in plan.record() and plan.record()["cluster"] == "tcp://10.0.0.1:8786"
    assert plan_of(workers="3").workers == 3
    assert plan_of().cluster is None and plan_of().workers is None


def test_cluster_and_workers_together_or_with_dry_run_are_usage_errors():
    with pytest.raises(UsageError, match="--cluster and --workers"):
        plan_of(cluster="tcp://a:1", workers=2)
    with pytest.raises(UsageError, match="--dry-run"):
        plan_of(workers=2, dry_run=True)
    with pytest.raises(UsageError):
        plan_of(workers=0)


def test_credentials_in_the_given_values_never_reach_the_history_record():
    plan = plan_of(cluster="tcp://a:1", header=["Authorization: Bearer s3cret"])
    assert "s3cret" not in repr(plan) and "s3cret" not in repr(plan.record())


def test_the_parent_caps_nodes_only_where_their_tuners_search_connections():
    from dtune.cluster.run import conducted
    assert conducted(plan_of(workers=3))
    assert conducted(plan_of(workers=3, cc=4))                       # p is still searched
    assert not conducted(plan_of(workers=3, cc=4, parallelism=2))              # the user's values stay
    assert not conducted(plan_of(workers=3, online=False))
    assert not conducted(plan_of(workers=3, limit_rate="5M"))
