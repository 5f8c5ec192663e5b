"""Untrusted XML (Metalinks, S3 listings) parsed without entity expansion.

Before ElementTree sees a document, a pass with expat refuses any DOCTYPE
(internal or external) and any entity declaration, so entity expansion
("billion laughs") and external entities never happen.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from xml.parsers import expat


class _Refused(Exception):
    pass


def _refuse_doctype(*_args: object) -> None:
    raise _Refused("DOCTYPE declarations are not allowed")


def _refuse_entity(*_args: object) -> None:
    raise _Refused("entity declarations are not allowed")


def _check_no_dtd(body: bytes) -> None:
    """Raise ``_Refused`` on a DOCTYPE or ENTITY declaration, ``ExpatError`` on bad XML."""
    scanner = expat.ParserCreate()
    scanner.StartDoctypeDeclHandler = _refuse_doctype
    scanner.EntityDeclHandler = _refuse_entity
    scanner.UnparsedEntityDeclHandler = _refuse_entity
    scanner.ExternalEntityRefHandler = _refuse_entity
    scanner.Parse(body, True)


def parse_untrusted(body: bytes, bad: Callable[[str], Exception]) -> ET.Element:
    """The root element of ``body``; ``bad(why)`` is raised for a refused or broken document."""
    try:
        _check_no_dtd(body)
        return ET.fromstring(body)
    except _Refused as exc:
        raise bad(f"{exc} (refusing a document that could expand entities)") from None
    except (expat.ExpatError, ET.ParseError) as exc:
        raise bad(f"not well-formed XML: {exc}") from None
    except (ValueError, LookupError, RecursionError) as exc:  # bad encoding declaration, absurd nesting
        raise bad(f"cannot be read: {exc}") from None
