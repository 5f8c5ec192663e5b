"""Tuners: pure decision objects that pick cc/p/pp (per partition) and revise them.

``base`` holds the contract (``Tuner``, ``TunerPlan``, ``Decision``,
``RangePolicy``, ``Fixed``); ``registry`` lists the tuners and builds them by
name; each tuner has a module named after it: ``static``, ``golike``,
``promc`` (SC, MC and ProMC, on the size partitions and Algorithm 1 of
``heuristic``), ``mdtp`` (and its static-chunks baseline), ``dtree``,
``ditacchio``.
"""

from dtune.tuners.base import Decision, Fixed, RangePolicy, Tuner, TunerPlan
from dtune.tuners.registry import TUNERS, make_tuner

__all__ = ["TUNERS", "Decision", "Fixed", "RangePolicy", "Tuner", "TunerPlan", "make_tuner"]
