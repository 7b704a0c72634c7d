"""The one `HOST:PORT` parser and formatter (scheduler/addresses.py): the engine's
dist_init_addr, the router's --replica and --replicas-dns and every address a server or
router listens on go through them; their callers' own tests check the field they name."""

from __future__ import annotations

import pytest

from scheduler.addresses import format_address, parse_address


@pytest.mark.parametrize("text, parsed", [
    ("engines.ns.svc:7000", ("engines.ns.svc", 7000)),
    ("10.0.0.1:1", ("10.0.0.1", 1)),
    ("[::1]:65535", ("::1", 65535)),
    ("::1:50051", ("::1", 50051)),  # the last colon splits
])
def test_an_address_parses_to_its_host_and_port(text, parsed):
    assert parse_address(text, "dist_init_addr") == parsed


@pytest.mark.parametrize("text", ["engines", "engines:", ":7000", "[]:7000", "engines:0",
                                  "engines:x", "engines:-1", "engines:70000"])
def test_a_bad_address_is_refused_naming_its_field_and_shape(text):
    with pytest.raises(ValueError) as info:
        parse_address(text, "replicas-dns", "NAME:PORT")
    assert str(info.value) == (f"replicas-dns: expected NAME:PORT with a port in [1, 65535], "
                               f"got {text!r}")


@pytest.mark.parametrize("host, port, text", [
    ("127.0.0.1", 0, "127.0.0.1:0"),
    ("node0", 50051, "node0:50051"),
    ("::1", 80, "[::1]:80"),
    ("[::1]", 80, "[::1]:80"),
])
def test_an_address_is_formatted_with_an_ipv6_host_in_brackets(host, port, text):
    assert format_address(host, port) == text


@pytest.mark.parametrize("host", ["node0", "10.0.0.1", "::1"])
def test_a_formatted_address_parses_back(host):
    assert parse_address(format_address(host, 9), "x") == (host, 9)
