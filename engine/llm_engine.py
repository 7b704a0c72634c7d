"""LLMEngine: the step loop that joins the scheduler, the KV cache manager and an executor."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable

from engine.call import Call, FinishReason
from engine.config import EngineConfig
from engine.detokenizer import StopStringScanner
from engine.errors import DuplicateCallError, StepFailedError
from engine.executor import Executor, StepResult
from engine.kv_spec import kv_cache_spec
from engine.loader import ModelInfo, read_model_dir, read_model_info
from engine.logprobs import TokenLogprob
from engine.model_runner import ModelRunner
from engine.parallel.executor import TensorParallelExecutor
from engine.outputs import CompletionOutput, StepOutput
from engine.sampling_params import SamplingParams
from engine.stats import EngineCounters, EngineStats
from engine.text_codec import Prompt, TextCodec
from engine.structured.spec import StructuredOutput
from engine.structured.state import GrammarState
from kvcache.cache_events import CacheDigest
from kvcache.manager import KVCacheManager
from scheduler.call_state import SampledToken
from scheduler.deadlines import MAX_EXPECTED_TOOL_SECONDS, check_ttft_slo
from scheduler.ids import short
from scheduler.plan import SchedulePlan
from scheduler.policies import make_policy
from scheduler.preemption import PreemptionKind
from scheduler.process_table import CallRecord, ProgramRecord
from scheduler.scheduler import Scheduler

class LLMEngine:
    """Accepts calls, runs steps, returns per-step outputs.

    Contract: `add_call` validates everything up front (ValueError naming the field) so a
    call that enters the scheduler can always run; `abort_call` and finishing release all
    of a call's blocks at once. The clock is injected (wall clock by default).

    The model is read from the directory `config.model` (weights, shape, EOS ids,
    tokenizer), except with an injected `executor` and `model` given: then no directory is
    read. One KVCacheSpec (`kv_spec`: the runner's, or built the same way for an injected
    executor) sizes the pool, the runner's cache and the scheduler's `bytes_per_block`.
    """

    def __init__(self, config: EngineConfig, executor: Executor | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 model: ModelInfo | None = None) -> None:
        if model is not None and executor is None:
            raise ValueError("model: a ModelInfo needs an injected executor (the model runner "
                             "loads its weights from config.model)")
        self.config = config
        self.clock = clock
        files = read_model_dir(config.model) if model is None else None
        model = model or read_model_info(files)
        self.vocab_size = model.args.vocab_size
        self.eos_token_ids = frozenset(model.eos_token_ids)
        self.max_model_len = min(config.max_model_len or model.args.max_position_embeddings,
                                 model.args.max_position_embeddings)
        self.tokenizer = model.tokenizer
        if config.chat_template is not None:
            if self.tokenizer is None:
                raise ValueError("chat_template: this model has no tokenizer to render chats")
            self.tokenizer.use_chat_template(Path(config.chat_template).read_text())
        self.runner: ModelRunner | TensorParallelExecutor | None = None
        if executor is None:
            self.runner = (ModelRunner(config, files, self.max_model_len)
                           if config.tensor_parallel_size == 1 else
                           TensorParallelExecutor(config, files, self.max_model_len))
        self.executor: Executor = executor or self.runner
        self.kv_spec = self.runner.kv_spec if self.runner else kv_cache_spec(model.args, config)
        self.kv = KVCacheManager(self.kv_spec.num_blocks, config.block_size,
                                 config.num_host_blocks, config.enable_prefix_caching,
                                 attention_window=model.args.max_window)
        self.max_model_len = min(self.max_model_len, self._longest_call_fitting(model))
        self.scheduler = Scheduler(
            replace(config.scheduler, bytes_per_block=self.kv_spec.bytes_per_block), self.kv,
            make_policy(config.policy))
        self.calls: dict[str, Call] = {}
        self._arrivals = itertools.count()
        self._ended: list[StepOutput] = []
        self.counters = EngineCounters()
        self.text = TextCodec(self.tokenizer, self.vocab_size, self.max_model_len)

    def _longest_call_fitting(self, model: ModelInfo) -> int:
        """The longest call the pool can finish alone: the whole pool, or any length when
        every layer has a sliding window and the pool holds a window plus a step's tokens
        (the blocks before the window are dropped as the call runs)."""
        pool_tokens = self.kv.pool.num_usable * self.config.block_size
        held_at_most = (model.args.max_window + self.config.scheduler.max_num_batched_tokens
                        + 2 * self.config.block_size)  # a partial block at each end
        if model.args.max_window and held_at_most <= pool_tokens:
            return model.args.max_position_embeddings
        return pool_tokens

    # ----- programs ---------------------------------------------------------------------
    def start_program(self, program_id: str | None = None, tenant: str | None = None,
                      oracle_work: float | None = None,
                      program_class: str | None = None) -> str:
        """Open a program (a client may propose its id); `program_class` labels the kind of
        program (the `gittins` policy learns program sizes per tenant and class);
        `oracle_work` is its total service, known in advance only to the `oracle` policy
        (simulation and tests)."""
        program_id = self.scheduler.start_program(self.clock(), program_id, tenant,
                                                  program_class=program_class)
        self.scheduler.table.get(program_id).oracle_work = oracle_work
        return program_id

    def end_program(self, program_id: str, failed: bool = False) -> ProgramRecord:
        """End a program: its active calls are aborted and free their blocks. Returns the
        final record (again, for a recently ended program); an unknown id raises
        UnknownProgramError."""
        table = self.scheduler.table
        records = dict(table.get(program_id).active_calls) if program_id in table else {}
        record, calls = self.scheduler.end_program(program_id, self.clock(), failed)
        for call in calls:
            self._mark_aborted(call, records[call.call_id])
        return record

    def get_program(self, program_id: str) -> ProgramRecord:
        """The live process-table record (read it, do not change it)."""
        return self.scheduler.table.get(program_id)

    def on_program_end(self, callback: Callable[[ProgramRecord, float], None] | None) -> None:
        """Have `callback(final_record, now)` called (on the stepping thread) as each program
        ends: by end_program, TTL expiry, or its one call finishing (a one-call program)."""
        self.scheduler.table.on_end(callback)

    def programs_by_service(self, limit: int, tenant: str | None = None) -> list[ProgramRecord]:
        """Up to `limit` active programs with the most service, most first (only `tenant`'s
        when given; live records)."""
        return self.scheduler.table.top_by_service(limit, tenant)

    # ----- calls ------------------------------------------------------------------------
    def add_call(self, program_id: str | None, prompt: Prompt,
                 params: SamplingParams | None = None, thread_id: str | None = None,
                 call_id: str | None = None, tenant: str | None = None,
                 expected_tool_seconds: float | None = None,
                 program_service: float | None = None,
                 ttft_slo_seconds: float | None = None) -> str:
        """Queue a call of an active program (None: a fresh one-call program of `tenant`
        that ends with the call). `expected_tool_seconds` hints how long the tool call after
        this call takes (how long to keep the program's KV). `program_service` is the
        program's global service as a trusted router folds it over all replicas: the
        program's service is raised to it (never lowered; booked as floor, see
        ProcessTable.raise_service) before the policy places the call, so a program gets
        the same level on every replica. `ttft_slo_seconds` is the call's first-token
        deadline (None: the engine's, `ttft_slo_seconds` or `ttft_slo_tokens`). Everything
        is validated before anything is recorded."""
        params = params or SamplingParams()
        if program_service is not None and not (
                isinstance(program_service, (int, float)) and math.isfinite(program_service)
                and program_service >= 0):
            raise ValueError(f"program_service must be a finite number >= 0, got "
                             f"{program_service!r}")
        if expected_tool_seconds is not None and not (
                isinstance(expected_tool_seconds, (int, float))
                and 0 <= expected_tool_seconds <= MAX_EXPECTED_TOOL_SECONDS):
            raise ValueError(f"expected_tool_seconds must be in [0, "
                             f"{MAX_EXPECTED_TOOL_SECONDS:g}], got {expected_tool_seconds!r}")
        check_ttft_slo(ttft_slo_seconds)
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
        if params.stop and self.tokenizer is None:
            raise ValueError("stop: stop strings need a tokenizer (this model has none)")
        if params.prompt_logprobs is not None and self.runner is None:
            raise ValueError("prompt_logprobs: an injected executor does not compute them "
                             "(only the engine's own model runner does)")
        token_ids = self.tokenize_prompt(prompt)
        grammar = None if params.structured is None else self.grammar_state(params.structured)
        if program_id is not None:
            self.scheduler.table.get(program_id)
        index = next(self._arrivals)
        call_id = call_id if call_id is not None else f"call-{index}"
        if call_id in self.calls:
            raise DuplicateCallError(call_id)
        now = self.clock()
        if program_id is None:
            program_id = self.scheduler.start_program(now, f"call:{call_id}:{index}", tenant,
                                                      ephemeral=True)
        call = Call(call_id, token_ids, params, now, index, self.max_model_len, program_id,
                    self.eos_token_ids, grammar=grammar)
        self.calls[call_id] = call
        self.scheduler.add(call, now, program_id, thread_id, expected_tool_seconds,
                           program_service, ttft_slo_seconds)
        return call_id

    def abort_call(self, call_id: str) -> None:
        """Stop a call now and free its blocks; its final output comes with the next step.
        Unknown or finished ids are ignored."""
        call = self.calls.get(call_id)
        if call is not None and not call.is_finished:
            self._finish(call, FinishReason.ABORT)

    def _mark_aborted(self, call: Call, record: CallRecord) -> None:
        """Record the end of a call the scheduler has already finished."""
        self._set_result(call, FinishReason.ABORT, record)
        self._ended.append(StepOutput(call.call_id, [], True, FinishReason.ABORT))

    def token_texts(self, token_ids: Iterable[int]) -> dict[int, str]:
        """Each id's text, decoded alone (`TextCodec.token_texts`; any thread)."""
        return self.text.token_texts(token_ids)

    def detokenize(self, token_ids: list[int]) -> str:
        """The text of `token_ids` (`TextCodec.detokenize`; any thread)."""
        return self.text.detokenize(token_ids)

    def grammar_state(self, spec: StructuredOutput) -> GrammarState:
        """A fresh start state of `spec`'s output grammar (`TextCodec.grammar_state`; any
        thread: a server may compile off the engine thread first, `add_call` then finds it
        cached)."""
        return self.text.grammar_state(spec)

    def tokenize_prompt(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids, or a ValueError naming what is wrong with it
        (`TextCodec.tokenize_prompt`, then the batch bound without chunked prefill). Safe
        from any thread: it reads only state fixed at construction (a server tokenizes off
        the engine thread with it)."""
        token_ids = self.text.tokenize_prompt(prompt)
        batching = self.config.scheduler
        if not batching.enable_chunked_prefill \
                and len(token_ids) > batching.max_num_batched_tokens:
            raise ValueError(f"prompt: {len(token_ids)} tokens exceed max_num_batched_tokens "
                             f"({batching.max_num_batched_tokens}) with chunked prefill off")
        return token_ids

    # ----- the step ---------------------------------------------------------------------
    def step(self) -> list[StepOutput]:
        """Plan, execute and apply one step. If executing or applying raises, the step is
        undone (`_fail_step`) and StepFailedError is raised from the original error."""
        plan = self.scheduler.schedule(self.clock())
        try:
            result = self.executor.execute(plan)
            return self.apply(plan, result)
        except Exception as exc:
            raise StepFailedError(self._fail_step(plan), exc) from exc

    def _fail_step(self, plan: SchedulePlan) -> list[str]:
        """The calls `plan` names that are still live end with reason ERROR, their blocks
        freed, and nothing the step's copies were to write is ever served
        (Scheduler.abort_step). Their final outputs come with the next step; returns their
        ids."""
        failed = self.scheduler.abort_step(plan, self.clock())
        for call, record in failed:
            self._set_result(call, FinishReason.ERROR, record)
            self._ended.append(StepOutput(call.call_id, [], True, FinishReason.ERROR))
        return [call.call_id for call, _ in failed]

    def apply(self, plan: SchedulePlan, result: StepResult) -> list[StepOutput]:
        """Keep the prompt logprobs the step scored on their calls, hand the step to the
        scheduler (service, tokens, blocks, stop tokens and lengths), then cut stop strings
        and fix the results of finished calls. Also returns the final outputs of calls
        aborted, finished by a failed step, or failed with one, since the last step. If
        this raises, the calls the step finished before keep their finish
        (`_keep_finished`); the step's other calls are then `_fail_step`'s."""
        now = self.clock()
        logprobs = {c.call.call_id: lp for c, lp in zip(plan.chunks, result.logprobs)
                    if lp is not None} if result.logprobs else {}
        if result.prompt_logprobs:
            for chunk, scored in zip(plan.chunks, result.prompt_logprobs):
                chunk.call.prompt_logprobs.extend(scored)
        sampled: list[SampledToken] = []
        outputs: list[StepOutput] = []
        try:
            self.scheduler.update(plan, result.tokens, now, result.swap_seconds, sampled)
            for item in sampled:
                call, reason = item.call, item.finish_reason
                # A stop string counts even on the last token (the scheduler said LENGTH).
                if (reason != FinishReason.STOP and call.params.stop
                        and self._cut_stop_string(call)):
                    reason = FinishReason.STOP
                outputs.append(self._record(item, reason, logprobs.get(call.call_id), now))
        except Exception:
            self._keep_finished(outputs, sampled[len(outputs):], logprobs, now)
            raise
        if plan.swap_out or plan.swap_in:
            block_bytes = self.kv_spec.bytes_per_block
            self.counters.swap_out_bytes += len(plan.swap_out) * block_bytes
            self.counters.swap_in_bytes += len(plan.swap_in) * block_bytes
        self.counters.generation_tokens += len(sampled)
        outputs, self._ended = self._ended + outputs, []
        return outputs

    def _record(self, item: SampledToken, reason: str | None, logprob: TokenLogprob | None,
                now: float) -> StepOutput:
        """Book `item`'s token on its call (first token time, logprob) and, when `reason`
        ends the call, its result (finishing it, blocks released, unless the scheduler has);
        returns the token's output."""
        call = item.call
        if call.first_token_time is None:
            call.first_token_time = now
        if item.record is not None:  # the scheduler finished it already
            self._set_result(call, reason, item.record)
        elif reason is not None:
            self._finish(call, reason)
        if logprob is not None:
            call.logprobs.append(logprob)
        return StepOutput(call.call_id, [item.token], reason is not None, reason,
                          None if logprob is None else [logprob])

    def _keep_finished(self, recorded: list[StepOutput], unrecorded: list[SampledToken],
                       logprobs: dict[str, TokenLogprob], now: float) -> None:
        """`apply` is raising: the calls the step finished keep that finish, their final
        outputs coming with the next step: the `recorded` ones as they are, and those the
        scheduler ended with an `unrecorded` token recorded now with its reason (their stop
        strings are not scanned), but for one whose recording itself raised."""
        self._ended.extend(out for out in recorded if out.finished)
        for item in unrecorded:
            if item.record is not None and item.call.finish_reason is None:
                self._ended.append(self._record(item, item.finish_reason,
                                                logprobs.get(item.call.call_id), now))

    def _cut_stop_string(self, call: Call) -> bool:
        """Push the call's new tokens through its incremental stop-string scan (made at the
        first token; work per step bounded, whatever the output's length). Once a stop string
        appears, the text before the earliest one becomes the call's text. Only calls with
        stop strings come here, and those need a tokenizer (add_call)."""
        scanner = call.stop_scanner
        if scanner is None:
            scanner = call.stop_scanner = StopStringScanner(self.tokenizer.decode,
                                                            call.params.stop)
        at = scanner.push(call.all_token_ids[call.num_prompt_tokens + scanner.num_tokens:])
        if at is None:
            return False
        call.output_text = scanner.text_before(at)
        return True

    def _finish(self, call: Call, reason: str) -> None:
        record = self.scheduler.finish(call, self.clock())
        if reason == FinishReason.ABORT:
            self._mark_aborted(call, record)
        else:
            self._set_result(call, reason, record)

    def _set_result(self, call: Call, reason: str, record: CallRecord) -> None:
        """Fix a finished call's reason, text and usage (from its final scheduler record)."""
        call.finish_reason = reason
        call.finish_time = self.clock()
        call.queue_seconds, call.service_seconds = record.total_wait, record.total_service
        self.counters.prompt_tokens_cached += call.num_cached_tokens
        self.counters.prompt_tokens_computed += call.num_prompt_tokens - call.num_cached_tokens
        if call.output_text is None and self.tokenizer is not None:
            call.output_text = self.tokenizer.decode(call.output_token_ids)

    def close(self) -> None:
        """Stop the tensor-parallel workers, if any, and the grammar mask thread
        (idempotent; a closed engine cannot step). Memory goes with the engine."""
        if self.runner is not None:
            self.runner.close()

    # ----- results and checks -----------------------------------------------------------
    def has_unfinished_calls(self) -> bool:
        return self.scheduler.num_unfinished > 0

    @property
    def num_free_seats(self) -> int:
        """Running seats (`max_num_seqs`) not taken: calls the next step may admit."""
        return max(0, self.config.scheduler.max_num_seqs - self.scheduler.num_running)

    @property
    def num_running(self) -> int:
        """Calls in the running batch."""
        return self.scheduler.num_running

    @property
    def num_waiting(self) -> int:
        """Calls queued (waiting or swapped out), not running."""
        return self.scheduler.num_waiting

    def pop_completion(self, call_id: str) -> CompletionOutput:
        """Hand over a finished call's result and forget the call. A finished call stays in
        `calls` until popped (its id stays taken), so callers must pop what they submit."""
        call = self.calls[call_id]
        if not call.is_finished:
            raise ValueError(f"call_id {short(call_id)} has not finished")
        del self.calls[call_id]
        return CompletionOutput(
            call_id=call.call_id, prompt_token_ids=call.prompt_token_ids,
            token_ids=call.output_token_ids, text=call.output_text or "",
            finish_reason=call.finish_reason or "", num_cached_tokens=call.num_cached_tokens,
            num_preemptions=call.num_preemptions, queue_seconds=call.queue_seconds,
            service_seconds=call.service_seconds, arrival_time=call.arrival_time,
            first_token_time=call.first_token_time, finish_time=call.finish_time,
            logprobs=None if call.params.logprobs is None else list(call.logprobs),
            prompt_logprobs=(None if call.params.prompt_logprobs is None
                             else list(call.prompt_logprobs)))

    def cache_digest(self, epoch: int, since: int) -> CacheDigest:
        """KV events: what the device prefix cache stored and removed after event `since` of
        `epoch` (`kvcache.cache_events`)."""
        return self.kv.pool.cache_digest(epoch, since)

    def stats(self) -> EngineStats:
        """The engine's live load and counters (see EngineStats)."""
        pool, host = self.kv.pool, self.kv.host_pool
        scheduler = self.scheduler
        return EngineStats(
            load=scheduler.load(), kv_blocks_total=pool.num_usable,
            kv_blocks_free=pool.num_free - pool.num_cached_free,
            kv_blocks_cached=pool.num_cached_free, kv_blocks_used=pool.num_usable - pool.num_free,
            host_blocks_total=host.num_blocks, host_blocks_used=host.num_blocks - host.num_free,
            preemptions={kind.value: scheduler.preemptions[kind] for kind in PreemptionKind},
            promotions=scheduler.num_promotions, steps=scheduler.num_steps,
            counters=replace(self.counters))

    def check_integrity(self) -> None:
        """Raise if a KV or host block is leaked or double-owned, or if the scheduler's
        queues, its call records and the process table disagree."""
        self.scheduler.check_integrity()
