"""`agentix router` and `agentix serve --replicas N` refuse bad arguments in one line,
status 2, before anything starts."""

from __future__ import annotations

import pytest
from router_helpers import agentix


@pytest.mark.parametrize("args, message", [
    (("router", "--replica", "nohost"), "--replica: expected HOST:PORT"),
    (("router", "--replica", "127.0.0.1:1", "--cutoff", "-3"), "--cutoff"),
    (("serve", "--replicas", "2", "--router-token-file", "t"),
     "--router-token-file: not with --replicas"),
    (("router", "--replica", "127.0.0.1:1", "--metrics-port", "70000"),
     "metrics_port: must be in [0, 65535]"),
    (("router", "--replica", "127.0.0.1:1", "--placement-option", "bogus=1"),
     "--placement agentix: placement agentix: unknown option(s) bogus"),
    (("router", "--replica", "127.0.0.1:1", "--placement-option", "new_program_weight=-1"),
     "new_program_weight must be a number >= 0"),
    (("serve", "--replicas", "2", "--placement-option", "nothing"),
     "--placement-option: expected NAME=VALUE"),
    (("router", "--replica", "127.0.0.1:1", "--http-port", "0"), "http_port: the router's "
                                                                  "OpenAI door needs model"),
    (("serve", "--replicas", "0"), "--replicas"),
    (("router", "--replica", "127.0.0.1:1", "--infer-programs"),
     "--infer-programs: it infers the programs of the HTTP door's chat requests, so it needs "
     "--http-port"),
    (("serve", "--replicas", "2", "--infer-programs"), "--infer-programs: it infers"),
    (("router", "--replica", "127.0.0.1:1", "--reasoning-parser", "qwen3"),
     "--reasoning-parser: needs --model"),
])
def test_bad_arguments_are_one_line_and_status_2(args, message):
    process = agentix(*args)
    try:
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 2
    assert message in err and len(err.strip().splitlines()) == 1
