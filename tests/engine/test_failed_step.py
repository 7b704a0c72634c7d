"""A step that raises after planning is undone, never half-applied (DESIGN.md, "Failure
semantics"): the calls its plan names end with reason "error" and free every block; nothing
its copies were to write is ever served (no offload of it is stored on the host, no block it
fetched stays findable on the device); the multistep round ends; `check_integrity()` holds
and no block leaks on either tier. The executor is the real ModelRunner with one fault
injected at one point of one step (before the copies, after them, mid-forward, in the
sampler), in a step that moves KV through the host tier (prefix offloads and fetches, swap
out, swap in) or continues a multistep round; and at random points in random steps. The
failed calls are then added again, as a server's clients would, and every call's tokens, and
a later prefix hit through the host tier, must be transformers' greedy tokens. A call the
failing step had already finished keeps that finish; `LLM.generate` keeps no call of a batch
whose step failed."""

from __future__ import annotations

import contextlib
import enum
import random
import types
from dataclasses import dataclass
from typing import Callable, Iterator

import pytest

from engine import LLM, CompletionOutput, EngineConfig, LLMEngine, SamplingParams, StepOutput
from engine.call import Call, FinishReason
from engine.errors import StepFailedError
from engine.executor import StepResult
from engine.model_runner import ModelRunner
from scheduler.plan import SchedulePlan
from scheduler.preemption import PreemptionKind
from engine_checks import assert_all_free, random_tokens
from agentix_testing.tiny_llama import GreedyReference

NUM_HOST_BLOCKS = 32


class Fault(enum.Enum):
    BEFORE_COPIES = "before the copies"
    AFTER_COPIES = "after the copies"
    MID_FORWARD = "mid-forward"       # the first layer has written its KV, the last has not
    IN_SAMPLER = "in the sampler"     # the whole forward has run (or in the greedy screen)


class InjectedFault(RuntimeError):
    pass


def _raise(*_args, **_kwargs):
    raise InjectedFault


Injector = Callable[[SchedulePlan], Fault | None]


class FaultyExecutor:
    """The engine's ModelRunner, raising InjectedFault at the point `inject(plan)` names
    (None: the step runs normally); records every plan it is given and the failed ones."""

    def __init__(self, runner: ModelRunner, inject: Injector) -> None:
        self.runner, self.inject = runner, inject
        self.plans: list[SchedulePlan] = []
        self.failed_plans: list[SchedulePlan] = []
        self.faults: list[Fault] = []  # injected, in step order

    def execute(self, plan: SchedulePlan) -> StepResult:
        self.plans.append(plan)
        fault = self.inject(plan)
        if fault is None:
            return self.runner.execute(plan)
        self.failed_plans.append(plan)
        self.faults.append(fault)
        if fault is Fault.BEFORE_COPIES:
            raise InjectedFault
        with self._armed(fault):
            self.runner.execute(plan)
        raise AssertionError(f"the fault {fault.value} did not fire")

    @contextlib.contextmanager
    def _armed(self, fault: Fault) -> Iterator[None]:
        runner = self.runner
        if fault is Fault.AFTER_COPIES:  # swap_in is the last copy (out, then in)
            swap_in = runner.swapper.swap_in

            def copy_then_fail(pairs):
                swap_in(pairs)
                raise InjectedFault

            runner.swapper.swap_in = copy_then_fail
            undo = lambda: delattr(runner.swapper, "swap_in")  # noqa: E731
        elif fault is Fault.MID_FORWARD:
            undo = runner.model.model.layers[-1].register_forward_pre_hook(_raise).remove
        else:  # whichever samples the step: the sampler, or the greedy screen
            sampler, screen = runner.sampler, runner.greedy_screen
            runner.sampler = _raise
            if screen is not None:
                runner.greedy_screen = types.SimpleNamespace(tokens=_raise)

            def undo():
                runner.sampler, runner.greedy_screen = sampler, screen
        try:
            yield
        finally:
            undo()


def once(fault: Fault, when: Callable[[SchedulePlan], bool]) -> Injector:
    """Inject `fault` into the first step whose plan `when` accepts, and no other."""
    fired = []

    def inject(plan: SchedulePlan) -> Fault | None:
        if fired or not when(plan):
            return None
        fired.append(plan)
        return fault

    return inject


def named_calls(plan: SchedulePlan) -> set[str]:
    """The calls a plan names: its chunks', its preempted and its swapped calls."""
    return {c.call.call_id for c in plan.chunks} | set(plan.preempted) | set(plan.swapped)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@dataclass
class Submitted:
    program: str | None
    prompt: list[int]
    max_tokens: int
    kwargs: dict
    call_id: str


class StepClock:
    """The engine's clock: one second per step (the driver advances it)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Driver:
    """Runs calls on an engine whose executor fails now and then; at each failure, checks the
    failed step's aftermath and adds the failed calls again (new ids, same programs and
    prompts), as a server's clients would."""

    def __init__(self, engine: LLMEngine, clock: StepClock, executor: FaultyExecutor) -> None:
        self.engine, self.clock, self.executor = engine, clock, executor
        self.calls: dict[str, Submitted] = {}  # by name
        self.failures: list[StepFailedError] = []
        self.failed_at_steps: list[int] = []  # indexes into executor.plans
        self.fetched_at_failure = -1  # fetched_blocks right after the last failure

    def add(self, name: str, program: str | None, prompt: list[int], max_tokens: int,
            **kwargs) -> None:
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        call_id = self.engine.add_call(program, prompt, params, **kwargs)
        self.calls[name] = Submitted(program, prompt, max_tokens, kwargs, call_id)

    def drain(self) -> None:
        engine = self.engine
        while engine.has_unfinished_calls():
            try:
                engine.step()
            except StepFailedError as err:
                self._failed(err)
            self.clock.now += 1.0
            engine.check_integrity()

    def result(self, name: str) -> CompletionOutput:
        return self.engine.pop_completion(self.calls[name].call_id)

    def _failed(self, err: StepFailedError) -> None:
        engine, plan = self.engine, self.executor.plans[-1]
        assert isinstance(err.__cause__, InjectedFault)
        assert self.executor.failed_plans[-1] is plan
        self.failures.append(err)
        self.failed_at_steps.append(len(self.executor.plans) - 1)
        self.fetched_at_failure = engine.scheduler.stats()["fetched_blocks"]
        engine.check_integrity()
        # Exactly the calls the plan names failed, with everything they held.
        assert set(err.call_ids) == named_calls(plan) and err.call_ids
        live = {c for c, call in engine.calls.items() if not call.is_finished}
        assert not live & set(err.call_ids)
        for call_id in err.call_ids:
            assert engine.calls[call_id].finish_reason == FinishReason.ERROR
            assert engine.kv.block_table(call_id) == []
            assert engine.kv.num_host_blocks_of(call_id) == 0
        # Nothing the step's copies were to write is findable on either tier, and no host
        # block is held but by a swapped call (none for the step's offloads or reads).
        assert not any(engine.kv.pool.is_cached(d) for _, d in plan.swap_in)
        assert not any(engine.kv.host_pool.is_cached(h) for _, h in plan.swap_out)
        swapped = sum(engine.kv.num_host_blocks_of(c) for c in live)
        assert engine.kv.num_free_host_blocks == NUM_HOST_BLOCKS - swapped
        for name, sub in list(self.calls.items()):
            if sub.call_id in err.call_ids:
                assert engine.pop_completion(sub.call_id).finish_reason == FinishReason.ERROR
                self.add(name, sub.program, sub.prompt, sub.max_tokens, **sub.kwargs)


def make_driver(model_dir: str, inject: Injector, **overrides) -> Driver:
    config = dict(model=model_dir, block_size=4, num_kv_blocks=14,
                  num_host_blocks=NUM_HOST_BLOCKS, enable_prefix_caching=True, policy="atlas",
                  kv_memory="program", service_mode="tokens")
    clock = StepClock()
    engine = LLMEngine(EngineConfig.from_flat(**{**config, **overrides}), clock=clock)
    engine.executor = executor = FaultyExecutor(engine.runner, inject)
    return Driver(engine, clock, executor)


# ----- the prefix tier: offloads and fetches in one step ------------------------------------
def offloads_and_fetches(plan: SchedulePlan) -> bool:
    return bool(plan.swap_out and plan.swap_in and not plan.swapped)


def run_prefix_tier(model_dir: str, fault: Fault) -> tuple[Driver, dict[str, tuple]]:
    """Programs A and C keep their KV between calls (13 usable blocks of 4 tokens). A's prefix
    goes to host under a one-call program's prompt; C's long call fills the device; A's next
    call fetches its prefix back while evicting C's tail to host, in one step (the one that
    fails); C's next call fetches its tail back."""
    d = make_driver(model_dir, once(fault, offloads_and_fetches))
    rng = random.Random(0)
    d.engine.start_program("A")
    d.engine.start_program("C")
    prompts: dict[str, tuple] = {}

    def run(name: str, program: str | None, prompt: list[int], n: int, **kwargs):
        d.add(name, program, prompt, n, **kwargs)
        d.drain()
        out = d.result(name)
        prompts[name] = (prompt, n, out)
        return out

    a1 = run("a1", "A", random_tokens(rng, 10), 6, expected_tool_seconds=60.0)
    run("b", None, random_tokens(rng, 48), 4)
    c1 = run("c1", "C", random_tokens(rng, 36), 6, expected_tool_seconds=60.0)
    run("a2", "A", prompts["a1"][0] + a1.token_ids + random_tokens(rng, 5), 6)
    run("c2", "C", prompts["c1"][0] + c1.token_ids + random_tokens(rng, 3), 5)
    return d, prompts


# ----- swap preemption and multistep ---------------------------------------------------------
PROMPT_LENGTHS = [3, 7, 12, 17, 22, 29, 33, 40]
OUTPUT_LENGTHS = [9, 24, 5, 16, 20, 12, 7, 18]


def swaps_out(plan: SchedulePlan) -> bool:
    return PreemptionKind.SWAP in plan.preempted.values()


def swaps_in(plan: SchedulePlan) -> bool:
    return bool(plan.swap_in) and any(c not in plan.preempted for c in plan.swapped)


def continues_a_round(plan: SchedulePlan) -> bool:
    return plan.is_continuation


def run_swapping(model_dir: str, fault: Fault, when: Callable[[SchedulePlan], bool]
                 ) -> tuple[Driver, dict[str, tuple]]:
    """Eight programs whose prompts share two 8-token blocks run at once on 11 usable blocks:
    swap preemption (out and back in), the shared prefix cached, multistep rounds of 4."""
    d = make_driver(model_dir, once(fault, when), block_size=8, num_kv_blocks=12,
                    preemption_mode="swap", multistep=4)
    rng = random.Random(1)
    shared = random_tokens(rng, 16)
    prompts = {}
    for i, (n_prompt, n) in enumerate(zip(PROMPT_LENGTHS, OUTPUT_LENGTHS)):
        program = d.engine.start_program(f"p{i}")
        prompts[f"p{i}"] = (shared + random_tokens(rng, n_prompt), n)
        d.add(f"p{i}", program, *prompts[f"p{i}"])
    d.drain()
    return d, {name: (p, n, d.result(name)) for name, (p, n) in prompts.items()}


FAULTS = pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.name.lower())


def assert_reference_tokens(greedy: GreedyReference, results: dict[str, tuple]) -> None:
    for name, (prompt, n, out) in results.items():
        assert out.token_ids == greedy(prompt, n), name


@FAULTS
def test_a_failed_step_that_offloads_and_fetches_serves_neither_and_a_later_host_hit_is_exact(
        tiny_tied_llama, tiny_tied_greedy, fault):
    model_dir, _ = tiny_tied_llama
    d, results = run_prefix_tier(model_dir, fault)
    [plan], [failure] = d.executor.failed_plans, d.failures
    # The step fetching A's 3 host blocks while offloading C's 3 tail blocks failed: a2 only.
    assert (len(plan.swap_out), len(plan.swap_in)) == (3, 3)
    assert failure.call_ids == [plan.chunks[0].call.call_id]
    assert d.fetched_at_failure == 3
    # a2 again: A's prefix is on neither tier now (its fetch may not have run): recomputed.
    assert results["a2"][2].num_cached_tokens == 0
    # c2 hits 6 of C's blocks on the device and fetches its 7th back from the host.
    assert results["c2"][2].num_cached_tokens == 28
    assert d.engine.scheduler.stats()["fetched_blocks"] - d.fetched_at_failure == 1
    assert_reference_tokens(tiny_tied_greedy, results)
    for program in ("A", "C"):
        d.engine.end_program(program)
    assert_all_free(d.engine)


@pytest.mark.parametrize("when", [swaps_out, swaps_in, continues_a_round],
                         ids=lambda w: w.__name__)
@FAULTS
def test_a_failed_step_under_swap_preemption_or_multistep_fails_only_its_calls(
        tiny_tied_llama, tiny_tied_greedy, fault, when):
    model_dir, _ = tiny_tied_llama
    d, results = run_swapping(model_dir, fault, when)
    [failed_at] = d.failed_at_steps
    # The round ended with the failure: the next step is planned afresh.
    assert not d.executor.plans[failed_at + 1].is_continuation
    assert_reference_tokens(tiny_tied_greedy, results)
    for i in range(len(PROMPT_LENGTHS)):
        d.engine.end_program(f"p{i}")
    assert_all_free(d.engine)


def test_faults_at_random_points_in_a_tenth_of_the_steps_never_change_a_token(
        tiny_tied_llama, tiny_tied_greedy):
    """The issue's reproduction: three live programs, three turns each, whose KV a one-call
    program's long prompt pushes through the host tier every turn, on 13 blocks of 4 tokens;
    a fault at a random point (all four are hit) in about one step in eight; the failed
    calls added again. Before steps were undone, 2 of these 12 calls came back with other
    tokens than transformers', with `check_integrity()` passing throughout."""
    model_dir, _ = tiny_tied_llama
    rng = random.Random(20)
    d = make_driver(model_dir, lambda plan: rng.choice(list(Fault))
                    if rng.random() < 0.12 and plan.chunks else None)
    prompts = {p: random_tokens(rng, 6 + 3 * i) for i, p in enumerate("ABC")}
    results: dict[str, tuple] = {}
    for p in prompts:
        d.engine.start_program(p)
    for turn in range(3):
        for p in prompts:
            d.add(f"{p}{turn}", p, prompts[p], 5, expected_tool_seconds=30.0)
        filler = random_tokens(rng, 40)
        d.add(f"x{turn}", None, filler, 3)
        d.drain()
        results[f"x{turn}"] = (filler, 3, d.result(f"x{turn}"))
        for p in prompts:
            out = d.result(f"{p}{turn}")
            results[f"{p}{turn}"] = (prompts[p], 5, out)
            prompts[p] = prompts[p] + out.token_ids + random_tokens(rng, 3)
    stats = d.engine.scheduler.stats()
    assert set(d.executor.faults) == set(Fault)
    assert stats["offloaded_blocks"] > 0 and stats["fetched_blocks"] > 0
    assert_reference_tokens(tiny_tied_greedy, results)
    for p in prompts:
        d.engine.end_program(p)
    assert_all_free(d.engine)


# ----- a step that fails while its tokens are applied ----------------------------------------
class ApplyFault(enum.Enum):
    APPENDING = "appending its token (Scheduler.update)"
    STOP_SCAN = "scanning its text for stop strings (LLMEngine.apply)"


class FailingStopScan:
    """A call's stop-string scanner that finds nothing and raises InjectedFault once the
    call has `at` output tokens."""

    def __init__(self, at: int) -> None:
        self.at, self.num_tokens = at, 0

    def push(self, token_ids: list[int]) -> None:
        self.num_tokens += len(token_ids)
        if self.num_tokens >= self.at:
            raise InjectedFault


def fail_applying(call: Call, fault: ApplyFault, at: int) -> None:
    """Make the engine raise InjectedFault where `fault` says, applying `call`'s `at`-th
    output token (while appending it: before it is appended)."""
    if fault is ApplyFault.STOP_SCAN:
        call.stop_scanner = FailingStopScan(at)
        return
    append = call.append_token

    def append_token(token: int) -> str | None:
        if call.num_output_tokens + 1 == at:
            raise InjectedFault
        return append(token)

    call.append_token = append_token


@pytest.fixture(scope="module")
def byte_greedy(byte_llama):
    return GreedyReference(byte_llama[1])


FAILS_AT = 3  # b's token that fails to apply, in the step of a's last token


@pytest.mark.parametrize("a_first", [True, False], ids=["finishing_first", "failing_first"])
@pytest.mark.parametrize("fault", list(ApplyFault), ids=lambda f: f.name.lower())
def test_a_call_the_failing_step_had_finished_keeps_its_finish(byte_llama, byte_greedy,
                                                               fault, a_first):
    """Calls a (3 tokens) and b (6 tokens, a stop string) decode side by side; applying b's
    3rd token raises, in the step whose token ends a. Unless the fault comes before a's
    token is applied (b's chunk first, appending), a keeps its finish: all its tokens,
    "length", its final output with the next step, its blocks released; b fails."""
    model_dir, _ = byte_llama
    clock = StepClock()
    engine = LLMEngine(EngineConfig.from_flat(model=model_dir, block_size=4, num_kv_blocks=16,
                                              enable_prefix_caching=True), clock=clock)
    engine.executor = executor = FaultyExecutor(engine.runner, lambda plan: None)
    prompts = {"a": [72, 101, 108, 108, 111], "b": [84, 104, 101, 32, 113, 117, 105]}
    params = {"a": SamplingParams(max_tokens=3, ignore_eos=True),
              "b": SamplingParams(max_tokens=6, ignore_eos=True, stop=["#never#"])}
    names = ["a", "b"] if a_first else ["b", "a"]
    ids = {name: engine.add_call(None, prompts[name], params[name]) for name in names}
    fail_applying(engine.calls[ids["b"]], fault, FAILS_AT)
    streamed: dict[str, list[int]] = {call_id: [] for call_id in ids.values()}
    with pytest.raises(StepFailedError) as failure:
        for _ in range(FAILS_AT):
            for out in engine.step():
                streamed[out.call_id] += out.new_token_ids
            clock.now += 1.0
    assert isinstance(failure.value.__cause__, InjectedFault)
    assert len(executor.plans) == FAILS_AT
    assert [c.call.call_id for c in executor.plans[-1].chunks] == [ids[n] for n in names]
    engine.check_integrity()
    assert not engine.has_unfinished_calls()

    a_tokens = byte_greedy(prompts["a"], 3)
    b_applied = FAILS_AT - (fault is ApplyFault.APPENDING)
    kept = a_first or fault is ApplyFault.STOP_SCAN
    if kept:
        assert failure.value.call_ids == [ids["b"]]
        assert engine.step() == [StepOutput(ids["a"], [a_tokens[2]], True, "length"),
                                 StepOutput(ids["b"], [], True, "error")]
        a_result = (a_tokens, "length")
    else:  # b's token raised before a's was applied: the step named a and failed it too
        assert failure.value.call_ids == [ids["b"], ids["a"]]
        assert engine.step() == [StepOutput(ids[n], [], True, "error") for n in names]
        a_result = (a_tokens[:2], "error")
    a, b = (engine.pop_completion(ids[n]) for n in "ab")
    assert (a.token_ids, a.finish_reason) == a_result
    assert streamed[ids["a"]] + ([a_tokens[2]] if kept else []) == a.token_ids
    assert (b.token_ids, b.finish_reason) == (byte_greedy(prompts["b"], 6)[:b_applied],
                                              "error")
    assert engine.calls == {}
    assert_all_free(engine)


def test_generate_keeps_no_call_of_a_batch_whose_step_failed(tiny_tied_llama, tiny_tied_greedy):
    """Three prompts, two seats: the second step fails (in the sampler) while the third call
    waits. `generate` raises the StepFailedError and the engine keeps none of the three
    calls (the waiting one aborted) and no block; the next `generate` is exact."""
    model_dir, _ = tiny_tied_llama
    rng = random.Random(7)
    prompts = [random_tokens(rng, n) for n in (5, 9, 6)]
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    with LLM(model_dir, block_size=4, num_kv_blocks=14, max_num_seqs=2) as llm:
        engine = llm.engine
        engine.executor = executor = FaultyExecutor(
            engine.runner, once(Fault.IN_SAMPLER, lambda plan: len(executor.plans) == 2))
        with pytest.raises(StepFailedError) as failure:
            llm.generate(prompts, params)
        assert isinstance(failure.value.__cause__, InjectedFault)
        assert len(executor.plans) == 2 and len(failure.value.call_ids) == 2
        assert engine.calls == {} and not engine.has_unfinished_calls()
        assert_all_free(engine)
        outs = llm.generate(prompts, params)
        assert_all_free(engine)
    assert [o.token_ids for o in outs] == [tiny_tied_greedy(p, 4) for p in prompts]
