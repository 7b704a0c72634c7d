"""Hardening, stop strings: a call may carry at most 16 stop strings of at most 256 characters
(SamplingParams), and the engine and the stream check them incrementally over the new text,
never decoding the whole output per step. Before: 200,000 stop strings (2 MB) per call cut a
victim to 7-12 tokens/s. Now: attackers looping on calls with the largest allowed lists leave
a victim at least half the rate it gets beside the same attackers without stop strings (the
lists' own cost, apart from sharing the batch, which on this 2-core CPU alone can halve it),
and the server still serves right afterwards."""

from __future__ import annotations

import statistics
import threading
import time

import grpc
import pytest
from grpc_helpers import collect, gen_request, rpc_error, start, victim_rate, wait_idle

from engine.sampling_params import MAX_STOP_STRING_CHARS, MAX_STOP_STRINGS
from server import agentix_pb2_grpc

GREEDY = gen_request([1, 5, 6, 7], max_tokens=8, ignore_eos=True)
ATTACK_PROMPT = [1, 20, 21]
ATTACK_TOKENS = 200


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    server = start(tiny_llama_dir, num_kv_blocks=128)
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield agentix_pb2_grpc.AgentixStub(channel)


@pytest.fixture(scope="module")
def attack_text(stub) -> str:
    """The attack prompt's greedy text (ignore_eos): what the attackers' calls will produce."""
    _, text, final = collect(stub.Generate(gen_request(ATTACK_PROMPT, max_tokens=ATTACK_TOKENS,
                                                       ignore_eos=True)))
    assert final.finish_reason == "length" and len(text) > 2 * MAX_STOP_STRING_CHARS
    return text


def largest_stops(text: str) -> list[str]:
    """16 stop strings of 256 characters that never match `text` but keep the scans busy:
    near misses of the text itself (the stream holds back up to 255 characters of it until
    the miss), and periodic strings made of its most common characters."""
    n = MAX_STOP_STRING_CHARS
    near = [text[i:i + n - 1] + "#" for i in range(0, 4 * 8, 4)]
    periodic = [("w5 " * n)[:n - 1] + "#", "w" * (n - 1) + "#",
                (" w1" * n)[:n - 1] + "#", ("w" + " " * 3) * (n // 4 - 1) + "w  #"]
    stops = (near + periodic * 2)[:MAX_STOP_STRINGS]
    assert len(stops) == MAX_STOP_STRINGS and {len(s) for s in stops} == {n}
    assert not any(s in text for s in stops)
    return stops


def test_the_largest_allowed_stop_lists_never_stall_a_victim(server, stub, attack_text):
    stops = largest_stops(attack_text)
    errors: list[BaseException] = []
    finished = []

    def attacker(stop: threading.Event, stop_strings: list[str]) -> None:
        try:
            while not stop.is_set():
                _, text, final = collect(stub.Generate(gen_request(
                    ATTACK_PROMPT, max_tokens=ATTACK_TOKENS, ignore_eos=True,
                    stop=stop_strings)))
                # No stop string ever matches: the whole text comes back, streamed and final.
                assert final.finish_reason == "length"
                assert text == final.text == attack_text
                finished.append(bool(stop_strings))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def rate_beside_attackers(stop_strings: list[str]) -> float:
        stop = threading.Event()
        threads = [threading.Thread(target=attacker, args=(stop, stop_strings))
                   for _ in range(3)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.2)  # the attackers' calls are running
            return victim_rate(stub)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)

    plain, loaded = [], []
    for _ in range(3):  # interleaved, so machine noise falls on both alike
        plain.append(rate_beside_attackers([]))
        loaded.append(rate_beside_attackers(stops))
    assert not errors, errors
    assert any(finished), "the attackers with stop lists never completed a call"
    assert statistics.median(loaded) >= 0.5 * statistics.median(plain), (loaded, plain)

    expected = collect(stub.Generate(GREEDY))[0]
    assert expected == collect(stub.Generate(GREEDY))[0]
    server.engine_loop.call(lambda engine: engine.check_integrity())
    wait_idle(server)


def test_the_largest_allowed_stop_lists_still_cut_right(server, stub, attack_text):
    """A 256-character stop string across dozens of tokens, among 15 others that never
    match: the call stops there, and the streamed and final text are the text before it."""
    n = MAX_STOP_STRING_CHARS
    at = attack_text.index(" ", 100) + 1
    hit = attack_text[at + 3:at + 3 + n]
    stops = largest_stops(attack_text)[:MAX_STOP_STRINGS - 1] + [hit]
    ids, text, final = collect(stub.Generate(gen_request(
        ATTACK_PROMPT, max_tokens=ATTACK_TOKENS, ignore_eos=True, stop=stops)))
    assert final.finish_reason == "stop"
    assert text == final.text == attack_text[:attack_text.index(hit)]
    assert len(ids) < ATTACK_TOKENS
    wait_idle(server)


def test_longer_stop_lists_are_invalid_argument(server, stub):
    for stops, message in (([f"s{i}" for i in range(MAX_STOP_STRINGS + 1)],
                            f"stop: at most {MAX_STOP_STRINGS} strings"),
                           (["x" * (MAX_STOP_STRING_CHARS + 1)],
                            f"at most {MAX_STOP_STRING_CHARS} characters"),
                           ([f"s{i}" for i in range(200_000)], "stop: at most")):
        err = rpc_error(stub.Generate, gen_request(GREEDY.token_ids.ids, stop=stops))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in err.details() and len(err.details()) < 200
    err = rpc_error(stub.Generate, gen_request(GREEDY.token_ids.ids,
                                               stop_token_ids=list(range(65))))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith("stop_token_ids: at most 64")
    wait_idle(server)
