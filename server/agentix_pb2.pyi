from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CacheEventsRequest(_message.Message):
    __slots__ = ("epoch", "since")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    since: int
    def __init__(self, epoch: _Optional[int] = ..., since: _Optional[int] = ...) -> None: ...

class CacheEventsResponse(_message.Message):
    __slots__ = ("epoch", "next", "reset", "stored", "removed")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    next: int
    reset: bool
    stored: _containers.RepeatedScalarFieldContainer[int]
    removed: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, epoch: _Optional[int] = ..., next: _Optional[int] = ..., reset: _Optional[bool] = ..., stored: _Optional[_Iterable[int]] = ..., removed: _Optional[_Iterable[int]] = ...) -> None: ...

class StartProgramRequest(_message.Message):
    __slots__ = ("program_id", "tenant", "program_class")
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_CLASS_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    tenant: str
    program_class: str
    def __init__(self, program_id: _Optional[str] = ..., tenant: _Optional[str] = ..., program_class: _Optional[str] = ...) -> None: ...

class StartProgramResponse(_message.Message):
    __slots__ = ("program_id",)
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    def __init__(self, program_id: _Optional[str] = ...) -> None: ...

class EndProgramRequest(_message.Message):
    __slots__ = ("program_id", "failed")
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    failed: bool
    def __init__(self, program_id: _Optional[str] = ..., failed: _Optional[bool] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "seed", "max_tokens", "stop", "stop_token_ids", "ignore_eos", "json_schema", "logprobs", "prompt_logprobs")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    seed: int
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    json_schema: str
    logprobs: int
    prompt_logprobs: int
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: _Optional[bool] = ..., json_schema: _Optional[str] = ..., logprobs: _Optional[int] = ..., prompt_logprobs: _Optional[int] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "tool_calls", "tool_call_id", "name")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    name: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "parameters_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ...) -> None: ...

class ChatMessages(_message.Message):
    __slots__ = ("messages", "tools", "tool_choice")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    tool_choice: str
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tool_choice: _Optional[str] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("program_id", "thread_id", "call_id", "text", "token_ids", "messages", "sampling", "expected_tool_seconds", "program_priority", "ttft_slo_seconds")
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_TOOL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TTFT_SLO_SECONDS_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    thread_id: str
    call_id: str
    text: str
    token_ids: TokenIds
    messages: ChatMessages
    sampling: SamplingParams
    expected_tool_seconds: float
    program_priority: float
    ttft_slo_seconds: float
    def __init__(self, program_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., call_id: _Optional[str] = ..., text: _Optional[str] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., messages: _Optional[_Union[ChatMessages, _Mapping]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., expected_tool_seconds: _Optional[float] = ..., program_priority: _Optional[float] = ..., ttft_slo_seconds: _Optional[float] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "logprob", "top")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    top: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., top: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ("token_id", "logprob")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ...) -> None: ...

class Delta(_message.Message):
    __slots__ = ("token_ids", "text", "logprobs", "prompt_logprobs")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "cached_tokens", "completion_tokens", "queue_seconds", "service_seconds")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SERVICE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    queue_seconds: float
    service_seconds: float
    def __init__(self, prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., queue_seconds: _Optional[float] = ..., service_seconds: _Optional[float] = ...) -> None: ...

class Final(_message.Message):
    __slots__ = ("finish_reason", "usage", "text", "tool_calls", "reasoning")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    finish_reason: str
    usage: Usage
    text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    reasoning: str
    def __init__(self, finish_reason: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., text: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., reasoning: _Optional[str] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("call_id", "delta", "final")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    delta: Delta
    final: Final
    def __init__(self, call_id: _Optional[str] = ..., delta: _Optional[_Union[Delta, _Mapping]] = ..., final: _Optional[_Union[Final, _Mapping]] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("call_id",)
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    def __init__(self, call_id: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ("aborted",)
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    aborted: bool
    def __init__(self, aborted: _Optional[bool] = ...) -> None: ...

class GetProgramRequest(_message.Message):
    __slots__ = ("program_id",)
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    def __init__(self, program_id: _Optional[str] = ...) -> None: ...

class CallInfo(_message.Message):
    __slots__ = ("call_id", "thread_id", "arrival", "wait", "service", "queue")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ARRIVAL_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    thread_id: str
    arrival: float
    wait: float
    service: float
    queue: int
    def __init__(self, call_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., arrival: _Optional[float] = ..., wait: _Optional[float] = ..., service: _Optional[float] = ..., queue: _Optional[int] = ...) -> None: ...

class ProgramInfo(_message.Message):
    __slots__ = ("program_id", "tenant", "state", "service", "wait", "active_calls", "engine", "last_call_arrival", "last_call_completion", "num_calls", "prompt_tokens", "generated_tokens", "swap_time", "external_time", "program_class")
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CALLS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    LAST_CALL_ARRIVAL_FIELD_NUMBER: _ClassVar[int]
    LAST_CALL_COMPLETION_FIELD_NUMBER: _ClassVar[int]
    NUM_CALLS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SWAP_TIME_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_TIME_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_CLASS_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    tenant: str
    state: str
    service: float
    wait: float
    active_calls: _containers.RepeatedCompositeFieldContainer[CallInfo]
    engine: int
    last_call_arrival: float
    last_call_completion: float
    num_calls: int
    prompt_tokens: int
    generated_tokens: int
    swap_time: float
    external_time: float
    program_class: str
    def __init__(self, program_id: _Optional[str] = ..., tenant: _Optional[str] = ..., state: _Optional[str] = ..., service: _Optional[float] = ..., wait: _Optional[float] = ..., active_calls: _Optional[_Iterable[_Union[CallInfo, _Mapping]]] = ..., engine: _Optional[int] = ..., last_call_arrival: _Optional[float] = ..., last_call_completion: _Optional[float] = ..., num_calls: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., generated_tokens: _Optional[int] = ..., swap_time: _Optional[float] = ..., external_time: _Optional[float] = ..., program_class: _Optional[str] = ...) -> None: ...

class ModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfoResponse(_message.Message):
    __slots__ = ("model", "vocab_size", "max_model_len", "policy", "block_size", "num_kv_blocks")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    model: str
    vocab_size: int
    max_model_len: int
    policy: str
    block_size: int
    num_kv_blocks: int
    def __init__(self, model: _Optional[str] = ..., vocab_size: _Optional[int] = ..., max_model_len: _Optional[int] = ..., policy: _Optional[str] = ..., block_size: _Optional[int] = ..., num_kv_blocks: _Optional[int] = ...) -> None: ...

class EngineStatsRequest(_message.Message):
    __slots__ = ("top_programs",)
    TOP_PROGRAMS_FIELD_NUMBER: _ClassVar[int]
    top_programs: int
    def __init__(self, top_programs: _Optional[int] = ...) -> None: ...

class EngineStatsResponse(_message.Message):
    __slots__ = ("calls_running", "calls_waiting", "calls_swapped", "programs_active", "kv_blocks_total", "kv_blocks_free", "kv_blocks_cached", "kv_blocks_used", "host_blocks_total", "host_blocks_used", "queue_depths", "running_tokens", "waiting_tokens", "preemptions_recompute", "preemptions_swap", "preemptions_keep", "swap_out_bytes", "swap_in_bytes", "prompt_tokens_computed", "prompt_tokens_cached", "generation_tokens", "promotions", "steps", "top_programs")
    CALLS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    CALLS_WAITING_FIELD_NUMBER: _ClassVar[int]
    CALLS_SWAPPED_FIELD_NUMBER: _ClassVar[int]
    PROGRAMS_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_FREE_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_CACHED_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_USED_FIELD_NUMBER: _ClassVar[int]
    HOST_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    HOST_BLOCKS_USED_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTHS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    WAITING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_SWAP_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_KEEP_FIELD_NUMBER: _ClassVar[int]
    SWAP_OUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    SWAP_IN_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_COMPUTED_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_CACHED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMOTIONS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOP_PROGRAMS_FIELD_NUMBER: _ClassVar[int]
    calls_running: int
    calls_waiting: int
    calls_swapped: int
    programs_active: int
    kv_blocks_total: int
    kv_blocks_free: int
    kv_blocks_cached: int
    kv_blocks_used: int
    host_blocks_total: int
    host_blocks_used: int
    queue_depths: _containers.RepeatedScalarFieldContainer[int]
    running_tokens: int
    waiting_tokens: int
    preemptions_recompute: int
    preemptions_swap: int
    preemptions_keep: int
    swap_out_bytes: int
    swap_in_bytes: int
    prompt_tokens_computed: int
    prompt_tokens_cached: int
    generation_tokens: int
    promotions: int
    steps: int
    top_programs: _containers.RepeatedCompositeFieldContainer[ProgramInfo]
    def __init__(self, calls_running: _Optional[int] = ..., calls_waiting: _Optional[int] = ..., calls_swapped: _Optional[int] = ..., programs_active: _Optional[int] = ..., kv_blocks_total: _Optional[int] = ..., kv_blocks_free: _Optional[int] = ..., kv_blocks_cached: _Optional[int] = ..., kv_blocks_used: _Optional[int] = ..., host_blocks_total: _Optional[int] = ..., host_blocks_used: _Optional[int] = ..., queue_depths: _Optional[_Iterable[int]] = ..., running_tokens: _Optional[int] = ..., waiting_tokens: _Optional[int] = ..., preemptions_recompute: _Optional[int] = ..., preemptions_swap: _Optional[int] = ..., preemptions_keep: _Optional[int] = ..., swap_out_bytes: _Optional[int] = ..., swap_in_bytes: _Optional[int] = ..., prompt_tokens_computed: _Optional[int] = ..., prompt_tokens_cached: _Optional[int] = ..., generation_tokens: _Optional[int] = ..., promotions: _Optional[int] = ..., steps: _Optional[int] = ..., top_programs: _Optional[_Iterable[_Union[ProgramInfo, _Mapping]]] = ...) -> None: ...
