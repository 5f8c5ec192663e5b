"""dtune: self-tuning parallel HTTP transfer of large scientific datasets.

From Python: ``dtune.get(sources, out, **options)`` and ``await dtune.aget(...)``
(``dtune.api``), loaded on first use so that ``import dtune`` stays cheap.
"""

from dtune.version import __version__

_API = ("get", "aget", "Result", "FileReport")
__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> object:
    if name in _API:
        from dtune import api  # (on first use: `import dtune` stays cheap)
        return getattr(api, name)
    if name == "errors":  # ``except dtune.errors.DtuneError`` after a bare ``import dtune``
        import dtune.errors  # (on first use, as the API)
        return dtune.errors
    raise AttributeError(f"module 'dtune' has no attribute {name!r}")
