"""Metalink 4 (RFC 5854): sizes, hashes (the strongest wins), URLs by priority; DTDs and entities refused."""

from __future__ import annotations

import pytest
from support.paths import assert_sample_parses

from dtune.checksums import Checksum
from dtune.discovery.entries import Entry
from dtune.discovery.metalink import looks_like_metalink, parse_metalink
from dtune.errors import DiscoveryError

SHA = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n<metalink xmlns="urn:ietf:params:xml:ns:metalink">'


def doc(files: str) -> bytes:
    return f"{HEAD}{files}</metalink>".encode()


def test_sample_metalink_orders_urls_by_priority_and_skips_what_it_cannot_use() -> None:
    assert_sample_parses(parse_metalink, "sample.meta4", [
        Entry(name="run1/temperature.nc", size=14471447, checksum=Checksum("sha256", SHA, "metalink"), urls=(
            "http://mirror.example.fr/data/run1/temperature.nc",  # priority 1
            "http://mirror.example.de/data/run1/temperature.nc",  # priority 2
            "https://archive.example.org/slow/run1/temperature%20K.nc",  # no priority: last
        )),
        Entry(name="ünïcødé name.txt", urls=("http://a.example/%C3%BCn%C3%AFc%C3%B8d%C3%A9%20name.txt",)),
        Entry(name="../../etc/passwd", urls=("http://evil.example/passwd",)),  # raw: discover refuses it
    ], [
        "sample.meta4: file 'run1/temperature.nc': ignoring 1 non-HTTP URL(s)",
        "sample.meta4: file 'only-ftp.bin': ignoring 1 non-HTTP URL(s)",
        "sample.meta4: skipping file 'only-ftp.bin': no HTTP URL",
    ])


def test_equal_priorities_keep_document_order_and_duplicates_collapse() -> None:
    body = doc('<file name="a"><url priority="5">http://x/a</url><url priority="5">http://y/a</url>'
               '<url priority="1">http://z/a</url><url priority="5">http://x/a</url></file>')
    assert parse_metalink(body, "m").entries[0].urls == ("http://z/a", "http://x/a", "http://y/a")


def test_hash_type_is_case_insensitive_and_the_strongest_known_hash_wins() -> None:
    sha1 = "aa" * 20
    body = doc(f'<file name="a"><hash type="sha-1">{sha1}</hash><hash type="SHA-256">{SHA.upper()}</hash>'
               '<hash type="whirlpool">zz</hash><url>http://x/a</url></file>')
    listing = parse_metalink(body, "m")
    assert listing.entries[0].checksum == Checksum("sha256", SHA, "metalink")
    assert listing.warnings == []  # an unknown type beside a known one is not worth a word


def test_elements_of_other_namespaces_are_ignored() -> None:
    body = doc('<file name="a"><size xmlns="urn:other">nope</size><url>http://x/a</url></file>')
    assert parse_metalink(body, "m").entries == [Entry(name="a", urls=("http://x/a",))]


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="&lol3;"><url>http://x/a</url></file></metalink>"""

EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE m [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="&xxe;"><url>http://x/a</url></file></metalink>"""

EXTERNAL_DTD = b"""<?xml version="1.0"?>
<!DOCTYPE metalink SYSTEM "http://evil.example/m.dtd">
<metalink xmlns="urn:ietf:params:xml:ns:metalink"/>"""

UTF16_BOMB = BILLION_LAUGHS.replace(b'<?xml version="1.0"?>', b'<?xml version="1.0" encoding="UTF-16"?>'
                                    ).decode().encode("utf-16")


@pytest.mark.parametrize(("body", "reason"), [
    pytest.param(BILLION_LAUGHS, "DOCTYPE declarations are not allowed", id="billion-laughs"),
    pytest.param(EXTERNAL_ENTITY, "DOCTYPE declarations are not allowed", id="external-entity"),
    pytest.param(EXTERNAL_DTD, "DOCTYPE declarations are not allowed", id="external-dtd"),
    pytest.param(UTF16_BOMB, "DOCTYPE declarations are not allowed", id="utf16-billion-laughs"),
    pytest.param(b"", "not well-formed XML", id="empty"),
    pytest.param(b"<metalink", "not well-formed XML", id="truncated"),
    pytest.param(doc('<file name="&undefined;"/>'), "not well-formed XML", id="undefined-entity"),
    pytest.param(b'<?xml version="1.0" encoding="no-such"?><a/>', "unknown encoding", id="bad-encoding"),
    pytest.param(b'<metalink xmlns="http://www.metalinker.org/"><files><file name="a"><resources>'
                 b'<url preference="best">http://x/a</url></resources></file></files></metalink>',
                 "url preference 'best' is not a number", id="v3-preference"),
    pytest.param(b"<metalink/>", "root element is 'metalink'", id="no-namespace"),
    pytest.param(b"<rss/>", "root element is 'rss'", id="not-metalink"),
    pytest.param(doc("<file><url>http://x/a</url></file>"), "<file> number 1 has no name", id="no-name"),
    pytest.param(doc('<file name="a"><size>-1</size></file>'), "<size> is not a non-negative", id="neg-size"),
    pytest.param(doc('<file name="a"><size>1.5</size></file>'), "<size>", id="float-size"),
    pytest.param(doc('<file name="a"><size>\u0661</size></file>'), "<size>", id="arabic-digit-size"),
    pytest.param(doc('<file name="a"><hash type="sha-256">abc</hash></file>'), "not 64 hex", id="short-hash"),
    pytest.param(doc('<file name="a"><url priority="high">http://x/a</url></file>'), "priority", id="prio"),
])
def test_refused_metalinks_are_one_line_discovery_errors(body: bytes, reason: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        parse_metalink(body, "evil.meta4")
    message = str(info.value)
    assert message.startswith("evil.meta4: Metalink: ")
    assert reason in message
    assert "\n" not in message


@pytest.mark.parametrize(("path", "head", "expected"), [
    ("x.meta4", b"", True),
    ("X.METALINK", b"", True),
    ("list", b"<?xml version='1.0'?>", True),
    ("list", b"\xef\xbb\xbf  \n<metalink xmlns=", True),
    ("list", b"http://h/a", False),
    ("list.txt", b"# <?xml", False),
])
def test_looks_like_metalink(path: str, head: bytes, expected: bool) -> None:
    assert looks_like_metalink(path, head) is expected
