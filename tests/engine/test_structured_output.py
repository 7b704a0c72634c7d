"""Constrained decoding (`SamplingParams(structured=StructuredOutput(json_schema))`) on the
byte-level tiny Llama: the engine's greedy tokens are transformers' greedy tokens under the
same llguidance mask, step by step, alone, batched with unconstrained calls, through
preemption (recompute, swap, keep), multistep and chunked prefill; logprobs stay those of the
unmasked model; bad schemas and tokenizer-less models are refused before anything is recorded;
a schema compiles once; a panic in one call's matcher fails that call only."""

from __future__ import annotations

import json

import llguidance
import llguidance.hf
import pytest
import torch
from llguidance import LLMatcher
from transformers import AutoTokenizer

from engine_checks import assert_all_free
from grammar_faults import PanickingMatcher, panic_in_grammars
from test_parity import RecordingExecutor
from agentix_testing.tiny_llama import GreedyReference, build_tiny_llama
from engine import LLM, SamplingParams
from engine.structured.compiler import GrammarCompiler
from engine.structured.spec import StructuredOutput
from engine.structured.state import GrammarState

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 384  # the tiny Llama's logits (the byte tokenizer spells ids 0-258 only)
# The reference's grammar options, written out here rather than taken from the engine.
COMPACT = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
MAX_TOKENS = 48  # every schema below completes well within this on every prompt

ENUM_OBJECT = json.dumps({
    "type": "object",
    "properties": {"a": {"enum": ["x", "yy"]},
                   "n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["a", "n"], "additionalProperties": False})
SHORT_ARRAY = json.dumps({
    "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
    "minItems": 1, "maxItems": 3})
NESTED = json.dumps({
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
        "meta": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                 "required": ["ok"], "additionalProperties": False}},
    "required": ["id", "tags", "meta"], "additionalProperties": False})
SCHEMAS = {"enum_object": ENUM_OBJECT, "short_array": SHORT_ARRAY, "nested": NESTED}
ANY_STRING = json.dumps({"type": "string"})

PROMPTS = ["hello", "abc", "The quick brown fox", "{", "name: "]


def structured(schema: str, max_tokens: int = MAX_TOKENS, **kwargs) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, structured=StructuredOutput(schema), **kwargs)


def matcher(ll_tokenizer, schema: str) -> LLMatcher:
    m = LLMatcher(ll_tokenizer, LLMatcher.grammar_from_json_schema(schema, overrides=COMPACT),
                  log_level=0)
    assert not m.is_error(), m.get_error()
    return m


def num_accepted(ll_tokenizer, schema: str, tokens: list[int]) -> int:
    """How many leading `tokens` a fresh matcher of `schema` takes before refusing one."""
    m = matcher(ll_tokenizer, schema)
    for i, token in enumerate(tokens):
        if not m.consume_token(token):
            return i
    return len(tokens)


class ConstrainedReference:
    """transformers' greedy decoding of `model` with llguidance's mask applied to the logits
    at every step (a logits processor built from llguidance directly), until the matcher
    stops or `max_new_tokens`; each (prompt, schema, length) computed once."""

    def __init__(self, model, ll_tokenizer) -> None:
        self.model, self.ll_tokenizer = model, ll_tokenizer
        self._answers: dict[tuple, list[int]] = {}

    def __call__(self, prompt: list[int], schema: str,
                 max_new_tokens: int = MAX_TOKENS) -> list[int]:
        key = (tuple(prompt), schema, max_new_tokens)
        if key not in self._answers:
            self._answers[key] = self._decode(prompt, schema, max_new_tokens)
        return self._answers[key]

    def _decode(self, prompt, schema, max_new_tokens) -> list[int]:
        # Imported here: llguidance.torch imports torch._dynamo (seconds), needed only to run.
        from llguidance.torch import (allocate_token_bitmask, apply_token_bitmask_inplace,
                                      fill_next_token_bitmask)

        m = matcher(self.ll_tokenizer, schema)
        bitmask = allocate_token_bitmask(1, VOCAB)
        step_ids, past, out = list(prompt), None, []
        while len(out) < max_new_tokens and not m.is_stopped():
            with torch.no_grad():
                result = self.model(torch.tensor([step_ids]), past_key_values=past,
                                    use_cache=True)
            past, logits = result.past_key_values, result.logits[:, -1].float()
            fill_next_token_bitmask(m, bitmask, 0)
            apply_token_bitmask_inplace(logits, bitmask)
            token = int(logits.argmax(dim=-1))
            assert m.consume_token(token)
            out.append(token)
            step_ids = [token]
        return out


@pytest.fixture(scope="module")
def hf_tokenizer(byte_llama):
    return AutoTokenizer.from_pretrained(byte_llama[0])


@pytest.fixture(scope="module")
def ll_tokenizer(hf_tokenizer):
    return llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=VOCAB)


@pytest.fixture(scope="module")
def reference(byte_llama, ll_tokenizer):
    return ConstrainedReference(byte_llama[1], ll_tokenizer)


@pytest.fixture(scope="module")
def greedy(byte_llama):
    return GreedyReference(byte_llama[1])


@pytest.fixture(scope="module")
def llm(byte_llama):
    """The plain engine (no preemption: the pool holds every test's batch), shared."""
    with LLM(byte_llama[0], block_size=8, num_kv_blocks=80) as llm:
        yield llm


# ----- 1. exactness against transformers ----------------------------------------------------

@pytest.mark.parametrize("name", list(SCHEMAS))
def test_constrained_greedy_is_transformers_under_the_same_mask(llm, reference, name):
    schema = SCHEMAS[name]
    outs = llm.generate(PROMPTS, structured(schema))
    assert_all_free(llm.engine)
    assert not llm.engine.has_unfinished_calls()
    for out in outs:
        assert out.token_ids == reference(out.prompt_token_ids, schema)
        assert out.finish_reason == "stop"  # the grammar completed, not EOS
        assert 2 not in out.token_ids
        assert matches_schema(name, json.loads(out.text)), out.text
    # The outputs are not all the same: each call decoded from its own prompt.
    assert len({o.text for o in outs}) > 1


def test_known_outputs(llm):
    """What the exactness above amounts to on this model (also documents the fixture)."""
    outs = llm.generate(["hello", "abc"], structured(ENUM_OBJECT))
    assert [o.text for o in outs] == ['{"a":"x","n":10}', '{"a":"x","n":41}']


# ----- 2. parity with unconstrained greedy where the grammar allows it ----------------------

# The tiny model is random, so its unconstrained greedy text is rarely JSON. This prompt was
# found by searching short lowercase prompts for one whose greedy continuation opens a JSON
# string: '"', '_', '1', '>' (K = 4 tokens a `{"type": "string"}` grammar allows), then a
# token the grammar refuses. The test checks that premise against transformers and llguidance
# first, so a changed fixture fails loudly instead of testing nothing.
PARITY_PROMPT = " kwdmjd"
PARITY_K = 4


def test_constrained_equals_unconstrained_while_the_grammar_allows_the_greedy_token(
        llm, greedy, reference, ll_tokenizer, hf_tokenizer):
    prompt = hf_tokenizer.encode(PARITY_PROMPT)
    free = greedy(prompt, 8)
    assert hf_tokenizer.decode(free[:PARITY_K]) == '"_1>'
    assert num_accepted(ll_tokenizer, ANY_STRING, free) == PARITY_K  # the premise

    outs = llm.generate([prompt, prompt], [SamplingParams(max_tokens=8, ignore_eos=True),
                                           structured(ANY_STRING, max_tokens=8)])
    assert_all_free(llm.engine)
    unconstrained, constrained = (o.token_ids for o in outs)
    assert unconstrained == free
    assert constrained[:PARITY_K] == unconstrained[:PARITY_K]
    # At K the mask removed the greedy token and the best allowed one was taken instead.
    assert constrained[PARITY_K] != unconstrained[PARITY_K]
    assert constrained == reference(prompt, ANY_STRING, 8)
    assert num_accepted(ll_tokenizer, ANY_STRING, constrained) == 8
    assert outs[1].finish_reason == "length"


# ----- 3. constrained and unconstrained calls in one batch ---------------------------------

MIXED = [("hello", ENUM_OBJECT), ("abc", None), ("The quick brown fox", NESTED),
         ("{", None), ("name: ", SHORT_ARRAY), ("xyz", None)]
FREE_LENGTHS = {"abc": 11, "{": 6, "xyz": 14}


def mixed_params() -> list[SamplingParams]:
    return [structured(schema) if schema else
            SamplingParams(max_tokens=FREE_LENGTHS[p], ignore_eos=True) for p, schema in MIXED]


def expected_mixed(reference, greedy, hf_tokenizer) -> list[list[int]]:
    out = []
    for p, schema in MIXED:
        ids = hf_tokenizer.encode(p)
        out.append(reference(ids, schema) if schema else greedy(ids, FREE_LENGTHS[p]))
    return out


@pytest.fixture(scope="module")
def mixed_outputs(llm):
    """The plain engine's outputs of MIXED twice over, in one batch."""
    outs = llm.generate([p for p, _ in MIXED] * 2, mixed_params() * 2)
    assert_all_free(llm.engine)
    return outs


def test_constrained_and_unconstrained_calls_share_a_batch(llm, mixed_outputs, reference,
                                                          greedy, hf_tokenizer):
    prompts = [p for p, _ in MIXED]
    params = mixed_params()
    outs = mixed_outputs[:len(MIXED)]
    assert [o.token_ids for o in mixed_outputs[len(MIXED):]] == [o.token_ids for o in outs]
    got = [o.token_ids for o in outs]
    assert got == expected_mixed(reference, greedy, hf_tokenizer)
    # The unconstrained calls, run alone, give the same tokens: the masks of their batch
    # neighbours did not touch their rows.
    free = [i for i, (_, schema) in enumerate(MIXED) if schema is None]
    alone = llm.generate([prompts[i] for i in free], [params[i] for i in free])
    assert [o.token_ids for o in alone] == [got[i] for i in free]
    assert [o.finish_reason for o in outs] == [
        "stop" if schema else "length" for _, schema in MIXED]


def matches_schema(name: str, value) -> bool:
    """`value` is an instance of SCHEMAS[name] (written out: no JSON Schema validator)."""
    if name == "enum_object":
        return (isinstance(value, dict) and set(value) == {"a", "n"}
                and value["a"] in ("x", "yy") and type(value["n"]) is int
                and 0 <= value["n"] <= 99)
    if name == "short_array":
        return (isinstance(value, list) and 1 <= len(value) <= 3
                and all(type(v) is int and 0 <= v <= 9 for v in value))
    return (isinstance(value, dict) and set(value) == {"id", "tags", "meta"}
            and type(value["id"]) is int and 0 <= value["id"] <= 999
            and isinstance(value["tags"], list) and len(value["tags"]) <= 2
            and all(t in ("a", "b") for t in value["tags"])
            and value["meta"] in ({"ok": True}, {"ok": False}))


def test_sampled_constrained_calls_stay_in_the_grammar(llm, ll_tokenizer):
    """Temperature, top-k and top-p sample among the allowed tokens only (a random model
    puts most of its mass outside them)."""
    names = list(SCHEMAS) * 2
    params = [structured(SCHEMAS[name], temperature=1.5, seed=seed, top_k=top_k, top_p=top_p)
              for seed, (name, top_k, top_p) in enumerate(
                  zip(names, (0, 3, 0, 500, 2, 0), (1.0, 1.0, 0.5, 0.9, 1.0, 0.2)))]
    outs = llm.generate(["hello", "abc", "xyz", "hello", "abc", "xyz"], params)
    assert_all_free(llm.engine)
    for out, name in zip(outs, names):
        assert out.finish_reason == "stop"
        assert matches_schema(name, json.loads(out.text)), out.text
        assert num_accepted(ll_tokenizer, SCHEMAS[name], out.token_ids) == len(out.token_ids)
    # A seeded constrained call draws the same tokens alone as in the batch.
    alone = llm.generate(["abc"], params[1])[0]
    assert alone.token_ids == outs[1].token_ids


# ----- 4. through preemption, multistep and chunked prefill ---------------------------------

MODES = {
    "recompute": dict(num_kv_blocks=12, preemption_mode="recompute"),
    "swap": dict(num_kv_blocks=12, preemption_mode="swap", num_host_blocks=40),
    "keep": dict(num_kv_blocks=12, preemption_mode="keep", enable_prefix_caching=True),
    "multistep": dict(num_kv_blocks=80, multistep=4),
    "multistep_preempting": dict(num_kv_blocks=12, preemption_mode="recompute", multistep=3),
    "chunked_prefill": dict(num_kv_blocks=80, max_num_batched_tokens=10),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_the_grammar_stays_exact_through_scheduling(byte_llama, mixed_outputs, mode):
    """Twelve calls (MIXED twice): a 12-block pool preempts constrained calls too. The
    plain run's tokens are transformers' (test above)."""
    prompts = [p for p, _ in MIXED] * 2
    params = mixed_params() * 2
    plain = [o.token_ids for o in mixed_outputs]

    with LLM(byte_llama[0], block_size=8, **MODES[mode]) as other:
        engine = other.engine
        recorder = engine.executor = RecordingExecutor(engine.runner)
        outs = other.generate(prompts, params)
        assert_all_free(engine)
        stats = engine.scheduler.stats()
    assert [o.token_ids for o in outs] == plain
    assert [o.finish_reason for o in outs] == ["stop" if s else "length" for _, s in MIXED] * 2
    if mode in ("recompute", "swap", "keep", "multistep_preempting"):
        assert engine.scheduler.num_preemptions > 0
        assert sum(o.num_preemptions for o in outs) == engine.scheduler.num_preemptions
        # Constrained calls themselves were preempted, not only the free ones.
        assert any(o.num_preemptions for o, (_, s) in zip(outs, MIXED * 2) if s)
    if mode == "swap":
        assert engine.scheduler.num_swap_outs > 0
        assert engine.scheduler.num_swap_ins == engine.scheduler.num_swap_outs
    if mode == "keep":
        assert stats["preemptions_keep"] > 0
    if mode.startswith("multistep"):
        assert sum(p.is_continuation for p in recorder.plans) > 0
    if mode == "chunked_prefill":  # "The quick brown fox" (19 tokens) was split
        assert any(not c.samples for p in recorder.plans for c in p.chunks)
        assert max(p.num_batched_tokens for p in recorder.plans) <= 10


# ----- 5. errors --------------------------------------------------------------------------

def engine_snapshot(engine):
    return (set(engine.calls), engine.kv.num_free_blocks, engine.has_unfinished_calls(),
            engine.scheduler.load())


def test_a_schema_llguidance_cannot_compile_is_refused_by_add_call(llm):
    engine = llm.engine
    before = engine_snapshot(engine)
    spec = StructuredOutput('{"type": "nosuch"}')  # valid JSON object: refused at compile
    with pytest.raises(ValueError, match=r"^json_schema: cannot be compiled: Invalid type: "
                                         r"nosuch$"):
        engine.add_call(None, [5, 6, 7], SamplingParams(max_tokens=4, structured=spec))
    assert engine_snapshot(engine) == before  # nothing recorded
    assert_all_free(engine)
    # The engine still decodes constrained calls.
    assert llm.generate(["hello"], structured(ENUM_OBJECT))[0].text == '{"a":"x","n":10}'
    assert_all_free(engine)


def test_generate_submits_nothing_when_a_schema_cannot_compile(llm):
    """LLM.generate validates a batch before submitting any of it, so a schema that cannot
    compile leaves no call behind (an earlier call of the batch would otherwise be run by the
    next generate and its completion never collected)."""
    engine = llm.engine
    before = engine_snapshot(engine)
    with pytest.raises(ValueError, match=r"^json_schema: cannot be compiled: regex parse"):
        llm.generate(["hello", "abc"], [SamplingParams(max_tokens=4), structured(
            '{"type": "string", "pattern": "(("}')])
    after = engine_snapshot(engine)
    for call_id in after[0] - before[0]:  # clean up first: the module's engine is shared
        engine.abort_call(call_id)
        engine.step()
        engine.pop_completion(call_id)
    assert_all_free(engine)
    assert after == before


@pytest.mark.parametrize("text, message", [
    ("not json", r"^json_schema: not valid JSON"),
    ("", r"^json_schema: not valid JSON"),
    ("[1, 2]", r"^json_schema: must be a JSON object"),
    ('"string"', r"^json_schema: must be a JSON object"),
    ("7", r"^json_schema: must be a JSON object"),
    ("x" * (64 * 1024 + 1), r"^json_schema: must be JSON text of at most 65536"),
])
def test_a_schema_that_is_not_a_json_object_is_refused(text, message):
    with pytest.raises(ValueError, match=message):
        StructuredOutput(text)


def test_structured_params_must_be_a_structured_output():
    with pytest.raises(ValueError, match=r"^structured: must be a StructuredOutput, got str"):
        SamplingParams(structured=ENUM_OBJECT)


def test_a_model_without_a_tokenizer_is_refused(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-no-tokenizer")
    build_tiny_llama(path, tie_word_embeddings=True)
    with LLM(str(path), block_size=8, num_kv_blocks=16) as bare:
        engine = bare.engine
        assert engine.tokenizer is None
        before = engine_snapshot(engine)
        with pytest.raises(ValueError, match=r"^structured: constrained decoding needs a "
                                             r"tokenizer"):
            engine.add_call(None, [5, 6, 7], structured(ENUM_OBJECT))
        assert engine_snapshot(engine) == before
        assert_all_free(engine)
        # Unconstrained calls still run.
        assert len(bare.generate([[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True))[0]
                   .token_ids) == 3


# ----- 6. the compile cache ---------------------------------------------------------------

@pytest.fixture
def compile_count(monkeypatch):
    """Counts GrammarCompiler compilations (of every compiler, the engines' included)."""
    counted = []
    original = GrammarCompiler._compile

    def counting(self, spec):
        counted.append(spec)
        return original(self, spec)

    monkeypatch.setattr(GrammarCompiler, "_compile", counting)
    return counted


def test_the_compiler_compiles_a_schema_once(hf_tokenizer, ll_tokenizer, compile_count):
    compiler = GrammarCompiler(hf_tokenizer, VOCAB, cache_size=2)
    first = compiler.state(StructuredOutput(SHORT_ARRAY))
    second = compiler.state(StructuredOutput(SHORT_ARRAY))  # equal spec, another object
    assert compiler.num_cached == 1 and len(compile_count) == 1
    # Each call gets its own state: advancing one leaves the other at the start.
    for token in hf_tokenizer.encode("[7]"):
        assert first.advance(token)
    assert first.is_complete and not second.is_complete
    assert second.advance(hf_tokenizer.encode("[")[0])
    assert not second.advance(hf_tokenizer.encode("]")[0])  # minItems 1

    # A schema that fails is not cached; others fill the cache up to its size (LRU).
    with pytest.raises(ValueError, match=r"^json_schema: cannot be compiled"):
        compiler.state(StructuredOutput('{"type": "nosuch"}'))
    assert compiler.num_cached == 1 and len(compile_count) == 2
    compiler.state(StructuredOutput(ENUM_OBJECT))
    compiler.state(StructuredOutput(SHORT_ARRAY))  # hit: now the most recently used
    assert compiler.num_cached == 2 and len(compile_count) == 3
    compiler.state(StructuredOutput(NESTED))  # evicts ENUM_OBJECT
    compiler.state(StructuredOutput(SHORT_ARRAY))
    assert compiler.num_cached == 2 and len(compile_count) == 4
    compiler.state(StructuredOutput(ENUM_OBJECT))
    assert compiler.num_cached == 2 and len(compile_count) == 5


def test_an_engine_compiles_a_schema_once_for_many_calls(llm, reference, compile_count):
    schema = json.dumps({"type": "array", "items": {"enum": ["p", "q"]}, "maxItems": 2})
    outs = llm.generate(["hello", "abc"], structured(schema))
    outs += llm.generate(["hello"], structured(schema))
    assert compile_count == [StructuredOutput(schema)]
    assert outs[0].token_ids == outs[2].token_ids  # the cached state starts every call afresh
    assert [o.token_ids for o in outs] == [reference(o.prompt_token_ids, schema) for o in outs]
    assert_all_free(llm.engine)


# ----- 7. max_tokens cuts a constrained call ------------------------------------------------

def test_max_tokens_cuts_a_constrained_call_to_a_prefix_the_grammar_allows(
        llm, reference, ll_tokenizer):
    outs = llm.generate(PROMPTS, structured(NESTED, max_tokens=7))
    assert_all_free(llm.engine)
    for out in outs:
        whole = reference(out.prompt_token_ids, NESTED)
        assert len(whole) > 7
        assert out.finish_reason == "length"
        assert out.token_ids == whole[:7]
        assert num_accepted(ll_tokenizer, NESTED, out.token_ids) == 7
        assert out.text[:6] == '{"id":' and out.text[6] in "0123456789"
        m = matcher(ll_tokenizer, NESTED)
        assert all(m.consume_token(t) for t in out.token_ids) and not m.is_stopped()


# ----- 8. logprobs come from the unmasked distribution ---------------------------------------

def test_logprobs_of_a_constrained_call_are_the_unmasked_models(llm, byte_llama, reference):
    model = byte_llama[1]
    params = [structured(ENUM_OBJECT, logprobs=3), structured(NESTED, logprobs=0),
              SamplingParams(max_tokens=5, ignore_eos=True, logprobs=2)]
    outs = llm.generate(["hello", "abc", "xyz"], params)
    assert_all_free(llm.engine)
    moved_counts = []
    for out, p, k in zip(outs, params, (3, 0, 2)):
        prompt, tokens = out.prompt_token_ids, out.token_ids
        if p.structured is not None:
            assert tokens == reference(prompt, p.structured.json_schema)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1]
        expected = torch.log_softmax(logits.float(), dim=-1)  # no mask
        assert [lp.token_id for lp in out.logprobs] == tokens
        got = torch.tensor([lp.logprob for lp in out.logprobs])
        want = expected.gather(1, torch.tensor(tokens)[:, None]).squeeze(1)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
        for lp, row in zip(out.logprobs, expected):
            top = row.topk(k)
            assert [t for t, _ in lp.top] == top.indices.tolist()
            torch.testing.assert_close(torch.tensor([v for _, v in lp.top]), top.values,
                                       atol=1e-4, rtol=0)
        if p.structured is not None:
            # Where the mask moved the choice off the model's argmax, the logprob is the
            # (lower) unmasked one of the token taken.
            argmax = expected.argmax(dim=-1).tolist()
            moved = [i for i, t in enumerate(tokens) if t != argmax[i]]
            assert all(got[i] < expected[i].max() for i in moved)
            moved_counts.append((len(moved), len(tokens)))
    # On this random model no constrained token was the unmasked argmax: (moved, tokens).
    assert moved_counts == [(16, 16), (47, 47)]


# ----- 9. a panic in one call's matcher fails that call only ----------------------------------

# ENUM_OBJECT's grammar under another text: only the calls given it get a panicking matcher.
PANICKY = json.dumps(json.loads(ENUM_OBJECT), indent=1)
PANICS_AT = 3


@pytest.mark.parametrize("method", ["consume_token", "unsafe_compute_mask_ptr"])
def test_a_panic_in_one_calls_matcher_fails_that_call_only(llm, mixed_outputs, reference,
                                                           greedy, hf_tokenizer, monkeypatch,
                                                           method):
    """One more call in MIXED's batch, whose matcher panics (a BaseException) at its 3rd
    token: taking it (the token is appended, then refused) or filling its mask (the token
    is then the unmasked argmax, and refused). That call ends with "error"; the others'
    tokens and reasons are those of the batch without it; nothing is left in the engine."""
    panic_in_grammars(monkeypatch, lambda spec: spec.json_schema == PANICKY, method,
                      PANICS_AT)
    prompts = [p for p, _ in MIXED] + ["hello"]
    outs = llm.generate(prompts, mixed_params() + [structured(PANICKY)])
    assert_all_free(llm.engine)
    assert llm.engine.calls == {}
    plain = mixed_outputs[:len(MIXED)]
    assert [(o.token_ids, o.finish_reason) for o in outs[:-1]] == [
        (o.token_ids, o.finish_reason) for o in plain]
    prompt = hf_tokenizer.encode("hello")
    constrained = reference(prompt, PANICKY)
    if method == "consume_token":
        expected = constrained[:PANICS_AT]
    else:
        allowed = constrained[:PANICS_AT - 1]
        expected = allowed + greedy(prompt + allowed, 1)
        assert expected[-1] != constrained[PANICS_AT - 1]  # unmasked: not the grammar's
    assert (outs[-1].token_ids, outs[-1].finish_reason) == (expected, "error")


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_or_exit_in_a_matcher_is_not_taken_for_its_failure(
        ll_tokenizer, hf_tokenizer, error):
    state = GrammarState(PanickingMatcher(matcher(ll_tokenizer, ENUM_OBJECT), "consume_token",
                                          1, error))
    with pytest.raises(error):
        state.advance(hf_tokenizer.encode("{")[0])
    assert not state.failed
