"""The emulated WAN testbed and the synthetic dataset generator.

``Testbed`` builds namespaces joined by emulated links (``Link``: rate, RTT,
queue, loss); ``load_scenario`` reads the same from TOML; ``make_dataset``
writes deterministic, incompressible datasets shaped like the papers' ones.
"""

from dtune_lab.testbed.scenario import HostConfig, Link, Scenario, load_scenario, scenario_from_dict
from dtune_lab.testbed.testbed import Testbed

__all__ = ["HostConfig", "Link", "Scenario", "Testbed", "load_scenario", "scenario_from_dict"]
