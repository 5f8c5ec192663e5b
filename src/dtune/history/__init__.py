"""The transfer history: one row per transfer, for reports and for the decision tree.

Every ``dtune get`` appends a row (key attributes, parameters θ = cc/p/pp/
cpu_num/cpu_freq, outcomes) and its per-second samples; ``dtune history``
lists, shows, exports and imports them; the decision-tree tuner learns from
``open_store().rows()``. See ``docs/history.md``.

Public API::

    open_store(url=None) -> HistoryStore
    HistoryStore.record(row, samples) -> int / list / get / samples / rows / export_csv / import_csv
    TransferRecord                      one row of ``transfers``
    record_from_result(result, plan_info) -> TransferRecord
    save_transfer(result, plan_info, url=None) -> int

Names are loaded on first use, so ``dtune --help`` does not import SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dtune.history.record import record_from_result, save_transfer
    from dtune.history.row import TransferRecord
    from dtune.history.store import HistoryStore, default_url, open_store, resolve_url

_WHERE = {
    "open_store": "store", "HistoryStore": "store", "default_url": "store", "resolve_url": "store",
    "TransferRecord": "row", "record_from_result": "record", "save_transfer": "record",
}

__all__ = ["HistoryStore", "TransferRecord", "default_url", "open_store", "record_from_result",
           "resolve_url", "save_transfer"]


def __getattr__(name: str) -> object:
    if name in _WHERE:
        return getattr(importlib.import_module(f"dtune.history.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'dtune.history' has no attribute {name!r}")

