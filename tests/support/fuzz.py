"""One budget for every property test of a parser of untrusted input.

``@FUZZ`` caps the examples per test: 100 by default, so the suite stays fast; a longer hunt sets
``DTUNE_FUZZ_EXAMPLES`` (``benchmarks/fuzz.py`` does, and writes its counts to
``docs/reliability.md``). Mark such tests ``@pytest.mark.fuzz`` so that the long run finds them.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("DTUNE_FUZZ_EXAMPLES", "100"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
