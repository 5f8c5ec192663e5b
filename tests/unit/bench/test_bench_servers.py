"""Server-side counters of the benchmark: nginx access-log parsing and its private config."""

from __future__ import annotations

from dtune_lab.bench.servers import Counters, bench_nginx_config, parse_access_log


def test_access_log_counts_requests_and_body_bytes() -> None:
    text = ("GET /ds/a%20b.html HTTP/1.1\t-\t200\t1000\n"
            "GET /ds/big.bin HTTP/1.1\tbytes=0-99\t206\t100\n"
            "GET /ds/ HTTP/1.1\t-\t200\t523\n"
            "\n")
    assert parse_access_log(text) == Counters(3, 1623)


def test_access_log_without_tabs_is_read_from_the_right() -> None:
    assert parse_access_log("GET /a b HTTP/1.1 bytes=0-1 206 2\n") == Counters(1, 2)


def test_malformed_lines_are_skipped() -> None:
    assert parse_access_log("garbage\nGET / HTTP/1.1\t-\t200\t5\n") == Counters(1, 5)


def test_counters_subtract() -> None:
    assert Counters(10, 1000) - Counters(4, 100) == Counters(6, 900)


def test_nginx_config_has_json_and_html_listings_and_the_log_format() -> None:
    conf = bench_nginx_config(wd="/w", addr="10.77.0.2", port=8080, root="/w/data")
    assert "daemon off;" in conf and "autoindex_format json;" in conf
    assert "listen 10.77.0.2:8080;" in conf and "listen 10.77.0.2:8081;" in conf
    assert '"$request\\t$http_range\\t$status\\t$body_bytes_sent"' in conf
    assert conf.count("{") == conf.count("}")
