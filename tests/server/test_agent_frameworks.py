"""Agent frameworks, unchanged, against the HTTP door, of one server and of a router in front
of a replica (the same door on `server.router.http_backend`): the OpenAI Agents SDK on its default
Responses model (a function tool, `output_type`, `Runner.run_streamed`, a run chained by
`previous_response_id` as one program from its second turn, a stateless run holding none),
LangChain's `ChatOpenAI` (`bind_tools` with a forced `tool_choice`,
`with_structured_output(..., method="json_schema")`), a LangGraph `create_react_agent` run,
and the openai SDK's streamed tool calls. Tools run on the model
that answers every chat with one hermes call of get_weather(city="Paris")
(tests/tool_call_model.py), so each run's turns are exact, and with a reasoning parser on
the model that thinks before that call (tests/reasoning_model.py), whose reasoning items the
SDK sends back; schemas run on the random
byte-level Llama, whose outputs are arbitrary but constrained. Offline: tracing is off and
nothing may connect past loopback (checked). The slow test repeats the forced call, a
structured answer and an Agents SDK run on SmolLM2."""

from __future__ import annotations

import asyncio
import enum
import json
from pathlib import Path
from typing import Literal

from offline_helpers import offline  # noqa: F401  (first: tracing off)

import agents
import openai
import pytest
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool
from grpc_helpers import server_config, wait_idle
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool as langchain_tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.prebuilt import create_react_agent
from pydantic import BaseModel, Field
from reasoning_model import REASONING
from tool_call_model import CALL_ARGUMENTS, CALL_WORDS

from server.app import start_server
from server.router import start_router

CALL_TOKENS = len(CALL_WORDS) + 1  # one answer of the tool-call model: its words, then EOS
CHATML_TOOLS = Path(__file__).parents[2] / "engine" / "chat_templates" / "chatml_tools.jinja"
SORRY = "Sorry, need more steps to process this request."  # LangGraph's out-of-steps answer

WEATHER: list[str] = []  # the cities get_weather was called with, in order


def get_weather(city: str) -> str:
    """The weather in a city."""
    WEATHER.append(city)
    return "sunny"  # a word of the tool-call model's vocabulary: prompt lengths stay exact


class Color(str, enum.Enum):
    red = "red"
    green = "green"


class Pick(BaseModel):
    """A color and a digit."""

    color: Color
    n: int = Field(ge=0, le=9)


def compact(model: BaseModel) -> str:
    """The constrained output a value came from (the server's JSON has no whitespace)."""
    return json.dumps(model.model_dump(mode="json"), separators=(",", ":"))


# --- servers ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def fresh_weather():
    WEATHER.clear()


class Routed:
    """A router's HTTP door in front of one replica, as the tests use a server: its
    `http_address`, and the replica's `engine_loop`."""

    def __init__(self, model_dir: str, **options) -> None:
        self.replica = start_server(server_config(model_dir), port=0)
        self.router = start_router(replicas=[self.replica.address], model=model_dir,
                                   http_port=0, served_model_name="tiny", **options)
        self.http_address = self.router.http_address
        self.engine_loop = self.replica.engine_loop

    def stop(self, grace: float) -> None:
        self.router.stop(grace)
        self.replica.stop(grace)


def serve(door: str, model_dir: str, **options):
    """The HTTP door of `door` ("server" or "router") over `model_dir`."""
    if door == "router":
        return Routed(model_dir, **options)
    return start_server(server_config(model_dir), port=None, http_port=0,
                        served_model_name="tiny", **options)


@pytest.fixture(scope="module", params=["server", "router"])
def tool_server(request, tool_call_model_dir):
    """Auto tool choice with the hermes parser, over the model's tool-aware template."""
    server = serve(request.param, tool_call_model_dir, tool_call_parser="hermes")
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module", params=["server", "router"])
def byte_server(request, byte_llama):
    server = serve(request.param, byte_llama[0])
    yield server
    server.stop(grace=0)


def base_url(server) -> str:
    return f"http://{server.http_address}/v1"


def generated(server) -> int:
    """Tokens the server has generated since it started (the count of model calls made, on
    the tool-call model: CALL_TOKENS each)."""
    wait_idle(server)
    return server.engine_loop.call(lambda engine: engine.stats().counters.generation_tokens)


# --- the OpenAI Agents SDK, on its default Responses model ------------------------------


def run_agent(server, streamed: bool = False, max_turns: int = 10, prompt: str = "hello",
              chained: bool = False, **agent_options):
    """(result, its stream events) of one Runner run of an agent on `server`'s Responses
    API, greedy unless `model_settings` says otherwise; an exception the run raises comes
    back as the result. `chained`: each turn continues the last by `previous_response_id`
    (the SDK's `auto_previous_response_id`)."""

    async def run():
        async with openai.AsyncOpenAI(base_url=base_url(server), api_key="unused",
                                      max_retries=0) as client:
            options = {"model_settings": ModelSettings(temperature=0, max_tokens=48),
                       **agent_options}
            agent = Agent(name="assistant",
                          model=OpenAIResponsesModel(model="tiny", openai_client=client),
                          **options)
            events = []
            try:
                run_options = dict(max_turns=max_turns, auto_previous_response_id=chained)
                if not streamed:
                    return await Runner.run(agent, prompt, **run_options), events
                result = Runner.run_streamed(agent, prompt, **run_options)
                async for event in result.stream_events():
                    events.append(event)
                return result, events
            except agents.AgentsException as exc:
                return exc, events

    return asyncio.run(run())


def kinds(events) -> list[tuple[str, str | None]]:
    return [(e.type, e.name if e.type == "run_item_stream_event" else
             getattr(e.data, "type", None) if e.type == "raw_response_event" else None)
            for e in events]


def raw(*types: str) -> list[tuple[str, str]]:
    return [("raw_response_event", t) for t in types]


def raw_events(events, kind: str) -> list:
    """The Responses API events of `kind` among a run's stream events."""
    return [e.data for e in events if e.type == "raw_response_event" and e.data.type == kind]


def test_agents_sdk_runs_the_tool_each_turn_until_max_turns(tool_server):
    before = generated(tool_server)
    error, _ = run_agent(tool_server, max_turns=3, tools=[function_tool(get_weather)])
    assert isinstance(error, agents.MaxTurnsExceeded)
    assert str(error) == "Max turns (3) exceeded"
    data = error.run_data
    assert WEATHER == ["Paris"] * 3  # the SDK ran the tool after each of the 3 turns
    assert generated(tool_server) - before == 3 * CALL_TOKENS  # 3 model calls, no more
    assert [type(item).__name__ for item in data.new_items] == \
        ["ToolCallItem", "ToolCallOutputItem"] * 3
    calls = [response.output for response in data.raw_responses]
    assert [[(c.type, c.name, c.arguments, c.status) for c in output] for output in calls] \
        == [[("function_call", "get_weather", CALL_ARGUMENTS, "completed")]] * 3
    ids = [output[0].call_id for output in calls]
    assert len(set(ids)) == 3 and all(i.startswith("call_") for i in ids)
    outputs = [item.raw_item for item in data.new_items[1::2]]
    assert outputs == [{"call_id": i, "output": "sunny", "type": "function_call_output"}
                       for i in ids]
    # Each turn sends the whole history back (the SDK's default): "tools hello go", then
    # one more "sunny" per tool result (a function_call item adds no word to the template).
    assert [response.usage.input_tokens for response in data.raw_responses] == [3, 4, 5]
    with openai.OpenAI(base_url=base_url(tool_server), api_key="unused",
                       max_retries=0) as client:  # stored, each in a one-call program
        assert [client.responses.retrieve(r.response_id).model_extra["program_id"]
                for r in data.raw_responses] == [None] * 3


def test_agents_sdk_chained_by_previous_response_id_is_one_program(tool_server):
    """`auto_previous_response_id`: each turn sends only its new items; the server's stored
    conversation makes the same prompts, and the run is one program from its second turn
    on (started by the first continuation), with no header."""
    error, _ = run_agent(tool_server, max_turns=3, chained=True,
                         tools=[function_tool(get_weather)])
    assert isinstance(error, agents.MaxTurnsExceeded) and WEATHER == ["Paris"] * 3
    turns = error.run_data.raw_responses
    assert [response.usage.input_tokens for response in turns] == [3, 4, 5]
    with openai.OpenAI(base_url=base_url(tool_server), api_key="unused",
                       max_retries=0) as client:
        first, *programs = [client.responses.retrieve(t.response_id).model_extra[
            "program_id"] for t in turns]
        program = programs[0]
        assert program.startswith("prog-") and (first, programs) == (None, [program] * 2)
        assert client.get(f"/programs/{program}", cast_to=object)["num_calls"] == 2
        client.post(f"/programs/{program}:end", body={}, cast_to=object)


def test_agents_sdk_sends_reasoning_items_back_with_each_turn(reasoning_model_dir):
    server = serve("server", reasoning_model_dir, tool_call_parser="hermes",
                   reasoning_parser="qwen3")
    try:
        error, _ = run_agent(server, max_turns=2, tools=[function_tool(get_weather)])
    finally:
        server.stop(grace=0)
    assert isinstance(error, agents.MaxTurnsExceeded) and WEATHER == ["Paris"] * 2
    data = error.run_data
    assert [type(item).__name__ for item in data.new_items] == \
        ["ReasoningItem", "ToolCallItem", "ToolCallOutputItem"] * 2
    assert [[(i.type, i.content[0].text if i.type == "reasoning" else i.name)
             for i in response.output] for response in data.raw_responses] == \
        [[("reasoning", REASONING), ("function_call", "get_weather")]] * 2
    # "tools hello go", then the first turn sent back: its reasoning item rendered with the
    # call's assistant turn (<think> weather? </think>), and the tool's "sunny"
    assert [response.usage.input_tokens for response in data.raw_responses] == [3, 7]


def test_agents_sdk_stops_on_the_first_tool_streamed_or_not(tool_server):
    options = dict(tools=[function_tool(get_weather)], tool_use_behavior="stop_on_first_tool")
    result, _ = run_agent(tool_server, **options)
    streamed, events = run_agent(tool_server, streamed=True, **options)
    assert (result.final_output, streamed.final_output) == ("sunny", "sunny")
    assert streamed.is_complete and WEATHER == ["Paris", "Paris"]
    assert [type(item).__name__ for item in streamed.new_items] == \
        [type(item).__name__ for item in result.new_items] == \
        ["ToolCallItem", "ToolCallOutputItem"]
    assert kinds(events) == [("agent_updated_stream_event", None)] + raw(
        "response.created", "response.in_progress", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done", "response.completed") + [
        ("run_item_stream_event", "tool_called"), ("run_item_stream_event", "tool_output")]
    done = raw_events(events, "response.function_call_arguments.done")
    assert [d.arguments for d in done] == [CALL_ARGUMENTS]


def test_agents_sdk_streamed_run_hits_max_turns_too(tool_server):
    result, events = run_agent(tool_server, streamed=True, max_turns=2,
                               tools=[function_tool(get_weather)])
    assert isinstance(result, agents.MaxTurnsExceeded)
    assert str(result) == "Max turns (2) exceeded" and WEATHER == ["Paris", "Paris"]
    assert [k for k in kinds(events) if k[0] == "run_item_stream_event"] == \
        [("run_item_stream_event", "tool_called"), ("run_item_stream_event", "tool_output")] * 2


def test_agents_sdk_output_type_is_constrained_streamed_or_not(byte_server):
    result, _ = run_agent(byte_server, output_type=Pick)
    streamed, events = run_agent(byte_server, streamed=True, output_type=Pick)
    final = result.final_output
    assert isinstance(final, Pick) and streamed.final_output == final  # greedy: the same
    (message,) = result.raw_responses[0].output
    text = message.content[0].text
    assert (message.type, message.status, text) == ("message", "completed", compact(final))
    kinds_seen = kinds(events)
    deltas = [e.delta for e in raw_events(events, "response.output_text.delta")]
    assert "".join(deltas) == text and len(deltas) == len(text)  # one byte token each
    assert kinds_seen == [("agent_updated_stream_event", None)] + raw(
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * len(text),
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed") + [
        ("run_item_stream_event", "message_output_created")]


# --- LangChain and LangGraph ------------------------------------------------------------


def chat_model(server, max_tokens: int = 96) -> ChatOpenAI:
    return ChatOpenAI(base_url=base_url(server), api_key="unused", model="tiny",
                      temperature=0, max_tokens=max_tokens, max_retries=0)


def test_langchain_forced_tool_choice_is_one_call_of_that_tool(byte_server):
    weather = langchain_tool(get_weather)
    # strict: the schema closes the object (additionalProperties false), so the random
    # model cannot wander into extra keys until max_tokens cuts it.
    model = chat_model(byte_server).bind_tools([weather], tool_choice="get_weather",
                                               strict=True)
    message = model.invoke("hi")
    assert isinstance(message, AIMessage) and message.content == ""
    assert message.response_metadata["finish_reason"] == "tool_calls"
    assert message.invalid_tool_calls == []
    (call,) = message.tool_calls
    assert (call["name"], list(call["args"]), call["type"]) == ("get_weather", ["city"],
                                                                "tool_call")
    assert isinstance(call["args"]["city"], str) and call["id"].startswith("call_")
    answer = weather.invoke(call)  # LangChain runs the tool on the call as it came
    assert isinstance(answer, ToolMessage)
    assert (answer.content, answer.tool_call_id) == ("sunny", call["id"])
    assert WEATHER == [call["args"]["city"]]


def test_langchain_structured_output_is_an_instance_of_the_schema(byte_server):
    structured = chat_model(byte_server).with_structured_output(
        Pick, method="json_schema", include_raw=True)
    out = structured.invoke("hello")
    parsed = out["parsed"]
    assert isinstance(parsed, Pick) and out["parsing_error"] is None
    assert out["raw"].content == compact(parsed)
    assert out["raw"].response_metadata["finish_reason"] == "stop"
    # The Responses API renders the same chat prompt: the Agents SDK gets the same value.
    assert run_agent(byte_server, output_type=Pick)[0].final_output == parsed


# create_react_agent is deprecated for langchain.agents.create_agent (LangGraph 1.0), not
# gone: the issue asks for it, and it is what most LangGraph agents still run.
@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")
def test_langgraph_react_agent_runs_the_tool_until_out_of_steps(tool_server):
    graph = create_react_agent(chat_model(tool_server, max_tokens=32),
                               [langchain_tool(get_weather)])
    before = generated(tool_server)
    state = graph.invoke({"messages": [("user", "hello")]}, {"recursion_limit": 6})
    messages = state["messages"]
    assert [type(m).__name__ for m in messages] == [
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert isinstance(messages[0], HumanMessage) and messages[0].content == "hello"
    first, second = messages[1], messages[3]
    for call_message, result in ((first, messages[2]), (second, messages[4])):
        (call,) = call_message.tool_calls
        assert (call_message.content, call["name"], call["args"]) == \
            ("", "get_weather", {"city": "Paris"})
        assert (result.content, result.name, result.tool_call_id) == \
            ("sunny", "get_weather", call["id"])
    assert first.tool_calls[0]["id"] != second.tool_calls[0]["id"]
    # The third answer was a call too, with too few steps left to run it: LangGraph
    # replaces it with its apology and stops.
    assert (messages[5].content, messages[5].tool_calls) == (SORRY, [])
    assert WEATHER == ["Paris", "Paris"]
    assert generated(tool_server) - before == 3 * CALL_TOKENS
    # An odd limit ends between the model and the tool node: an error after 2 tool runs.
    with pytest.raises(GraphRecursionError):
        graph.invoke({"messages": [("user", "hello")]}, {"recursion_limit": 5})
    assert WEATHER == ["Paris"] * 4


# --- the openai SDK, streamed tool calls ------------------------------------------------


class GetWeather(BaseModel):
    city: str


def test_openai_sdk_streamed_tool_call_deltas_assemble_to_the_call(tool_server):
    with openai.OpenAI(base_url=base_url(tool_server), api_key="unused",
                       max_retries=0) as client:
        tools = [openai.pydantic_function_tool(GetWeather, name="get_weather")]
        body = dict(model="tiny", messages=[{"role": "user", "content": "hello"}],
                    tools=tools, temperature=0, max_tokens=32)
        # By hand, as a client assembles them: by index, the name once, arguments joined.
        assembled: dict[int, dict[str, str]] = {}
        finish = []
        for chunk in client.chat.completions.create(stream=True, **body):
            for choice in chunk.choices:
                finish.append(choice.finish_reason)
                assert not choice.delta.content  # nothing of the call leaks as text
                for delta in choice.delta.tool_calls or ():
                    call = assembled.setdefault(delta.index, {"id": "", "name": "",
                                                              "arguments": ""})
                    call["id"] += delta.id or ""
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
        (call,) = assembled.values()
        assert (call["name"], json.loads(call["arguments"])) == ("get_weather",
                                                                 {"city": "Paris"})
        assert call["id"].startswith("call_") and len(call["id"]) == 29
        assert finish[-1] == "tool_calls" and set(finish[:-1]) == {None}
        # The SDK's own stream helper: its events, and the parsed final completion.
        with client.chat.completions.stream(**body) as stream:
            events = [e for e in stream if e.type.startswith("tool_calls.")]
            final = stream.get_final_completion()
    done = events[-1]
    # the opening, then the arguments as the model writes them: '{"city": ', '"Paris"}'
    assert [e.type for e in events] == ["tool_calls.function.arguments.delta"] * 3 + \
        ["tool_calls.function.arguments.done"]
    assert (done.name, done.index, done.arguments, done.parsed_arguments) == \
        ("get_weather", 0, CALL_ARGUMENTS, GetWeather(city="Paris"))
    choice = final.choices[0]
    # content "": the stream's first chunk is {"role": "assistant", "content": ""}, as
    # vLLM sends it (OpenAI sends null there; the non-streamed message has None).
    assert (choice.finish_reason, choice.message.content) == ("tool_calls", "")
    (parsed,) = choice.message.tool_calls
    assert (parsed.function.name, parsed.function.parsed_arguments) == \
        ("get_weather", GetWeather(city="Paris"))


# --- SmolLM2 (slow) ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_server():
    from engine.models.smollm2 import ensure_smollm2_dir

    config = server_config(str(ensure_smollm2_dir()), block_size=16, num_kv_blocks=256,
                           chat_template=str(CHATML_TOOLS))
    server = start_server(config, port=None, http_port=0, served_model_name="tiny",
                          tool_call_parser="hermes")
    yield server
    server.stop(grace=0)


class Capital(BaseModel):
    """The capital city asked about."""

    capital: Literal["Berlin", "London", "Paris"]


@pytest.mark.slow
def test_smollm2_forced_call_structured_answer_and_agent_run(smollm2_server):
    model = chat_model(smollm2_server, max_tokens=64)
    message = model.bind_tools([langchain_tool(get_weather)], tool_choice="get_weather",
                               strict=True).invoke("What is the weather in Paris?")
    assert [(c["name"], c["args"]) for c in message.tool_calls] == \
        [("get_weather", {"city": "Paris"})]
    answer = model.with_structured_output(Capital, method="json_schema").invoke(
        "What is the capital of France?")
    assert answer == Capital(capital="Paris")
    # The Agents SDK with the call forced on its first turn; the SDK runs the tool, resets
    # tool_choice and asks again, and the model answers in text.
    result, _ = run_agent(smollm2_server, tools=[function_tool(get_weather)], max_turns=3,
                          prompt="What is the weather in Paris?",
                          model_settings=ModelSettings(temperature=0, max_tokens=48,
                                                       tool_choice="get_weather"))
    assert WEATHER == ["Paris"]
    assert [type(item).__name__ for item in result.new_items] == \
        ["ToolCallItem", "ToolCallOutputItem", "MessageOutputItem"]
    assert len(result.raw_responses) == 2
    assert isinstance(result.final_output, str) and result.final_output
