"""The README's examples run as written. Each Python block marked `<!-- example: NAME -->` runs
(exec) against the server of the nearest block above it marked `<!-- server: NAME -->`, whose
first line is an `agentix serve` command: parsed and checked by the CLI itself
(`build_parser`, `serve_setup`), then started in process under the name it serves (its
`--served-model-name`, else its model directory's name) on the tool-call model
(tests/tool_call_model.py) when it parses tool calls, else on the tiny random Llama (a
`--chat-template` must exist, but the tiny model's own template stands in). An example changes
in one way only: its server's README addresses (`--host` with `--port` and `--http-port`)
become the live server's, and the offline examples' model path the tiny model's. So a model
name or address drifting from what its command serves fails here. Offline: tracing off, and
nothing past loopback."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from offline_helpers import offline  # noqa: F401  (first: tracing off)

import httpx
import pytest
from grpc_helpers import server_config
from tool_call_model import CALL_TEXT

from engine.models.smollm2 import default_cache_dir
from scheduler.process_table import ProgramState
from server.app import RunningServer, start_server
from server.cli import build_parser
from server.cli_checks import serve_setup

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
MODEL_PATH = "/path/to/hf-llama-dir"  # the offline examples' placeholder model directory
MARKED = re.compile(r"^<!-- (server|example): ([\w-]+) -->\n```\w+\n(.*?)^```", re.M | re.S)
# The part of the README whose Python blocks must all be marked examples.
SECTIONS = README[README.index("\n## Using it\n"):README.index("\n### Metrics, live stats")]


@dataclass(frozen=True)
class Example:
    code: str
    server: str | None  # the name of the server block above it; None: before any (offline)


def parse_readme() -> tuple[dict[str, str], dict[str, Example]]:
    """(each marked server block's first line, its `\\` continuations joined; each marked
    example)."""
    commands, found, server = {}, {}, None
    for kind, name, body in MARKED.findall(README):
        if kind == "server":
            server = name
            commands[name] = re.match(r"(?:.*\\\n)*.*", body).group().replace("\\\n", " ")
        else:
            found[name] = Example(body, server)
    return commands, found


COMMANDS, EXAMPLES = parse_readme()


def test_every_python_block_of_the_api_sections_is_a_marked_example():
    marked = re.findall(r"^<!-- example: [\w-]+ -->\n```python\n", SECTIONS, re.M)
    assert len(marked) == len(re.findall(r"^```python\n", SECTIONS, re.M))
    assert set(EXAMPLES) == set(CHECKS)


# --- the servers ------------------------------------------------------------------------


@dataclass(frozen=True)
class Live:
    """A README server block's server, running: the addresses its command gives (README's)
    and those it listens on (live)."""

    server: RunningServer
    addresses: dict[str, str]  # README address -> live address
    model_name: str


def start(command: str, tiny_llama_dir: str, tool_call_model_dir: str) -> Live:
    argv = shlex.split(command, comments=True)
    assert argv[:2] == ["agentix", "serve"]
    args = build_parser().parse_args(argv[1:])
    model_name = args.served_model_name or Path(args.model or default_cache_dir()).name
    if args.chat_template is not None:
        assert (ROOT / args.chat_template).is_file()
    model_dir = tool_call_model_dir if args.tool_call_parser else tiny_llama_dir
    ports = {"grpc": None if args.no_grpc else args.port, "http": args.http_port}
    args.model, args.chat_template = model_dir, None
    args.port = 0
    args.http_port = None if args.http_port is None else 0
    _, options = serve_setup(args)
    server = start_server(server_config(model_dir),
                          replace(options, served_model_name=model_name))
    live = {"grpc": server.address, "http": server.http_address}
    return Live(server, {f"{args.host}:{port}": live[kind]
                         for kind, port in ports.items() if port is not None}, model_name)


@pytest.fixture(scope="module")
def servers(tiny_llama_dir, tool_call_model_dir):
    """The live server of each README server block, started on first use."""
    running: dict[str, Live] = {}

    def get(name: str) -> Live:
        if name not in running:
            running[name] = start(COMMANDS[name], tiny_llama_dir, tool_call_model_dir)
        return running[name]

    yield get
    for live in running.values():
        live.server.stop(grace=0)


def program(live: Live, program_id: str) -> dict:
    """The HTTP door's record of a program (GET /v1/programs/{id})."""
    response = httpx.get(f"http://{live.server.http_address}/v1/programs/{program_id}")
    assert response.status_code == 200, response.text
    return response.json()


# --- each example's checks: (its namespace, what it printed, its server) ------------------


def offline_generate(ns, out, live):
    outs = ns["outs"]
    hello = ns["llm"].engine.tokenizer.encode("Hello!")
    assert [o.prompt_token_ids for o in outs] == [hello, [1, 2, 3]]
    first = outs[0]
    assert out == f"{first.text} {first.token_ids} {first.finish_reason}\n"


def offline_engine(ns, out, live):
    engine = ns["engine"]
    record = engine.end_program(ns["pid"])  # again: the final record
    assert (record.state, record.tenant, record.num_calls) == (ProgramState.COMPLETED,
                                                               "team-a", 1)
    assert not engine.has_unfinished_calls() and out == ""


def grpc_client(ns, out, live):
    end = ns["prog"].end_info  # ended as the block exited
    assert (end["state"], end["tenant"], end["num_calls"]) == ("completed", "me", 6)
    assert len(ns["branches"]) == 3 and out == ""


def http_chat(ns, out, live):
    assert ns["reply"].model == live.model_name
    assert program(live, "agent-42")["num_calls"] == 1 and out == ""


def openai_sdk(ns, out, live):
    assert out == "3\n" and program(live, ns["run_id"])["num_calls"] == 3


def langchain(ns, out, live):
    assert out == f"{CALL_TEXT}\n" and program(live, ns["run_id"])["num_calls"] == 1


def langgraph(ns, out, live):
    # The tool-call model calls the tool at every turn: 10 steps are 5 model turns (the
    # last one's call replaced by LangGraph's out-of-steps answer) and 4 tool turns.
    messages = ns["state"]["messages"]
    assert [type(m).__name__ for m in messages] == \
        ["HumanMessage"] + ["AIMessage", "ToolMessage"] * 4 + ["AIMessage"]
    assert [m.content for m in messages[2::2]] == ["sunny"] * 4
    assert out == f"{messages[-1].content}\n"
    assert program(live, ns["run_id"])["num_calls"] == 5


def agents_sdk(ns, out, live):
    assert out == "sunny\n" and program(live, ns["run_id"])["num_calls"] == 1


CHECKS = {"offline-generate": offline_generate, "offline-engine": offline_engine,
          "grpc-client": grpc_client, "http-chat": http_chat, "openai-sdk": openai_sdk,
          "langchain": langchain, "langgraph": langgraph, "agents-sdk": agents_sdk}


# create_react_agent is deprecated (LangGraph 1.0) for langchain.agents.create_agent, not gone.
@pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10")
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_readme_example_runs_as_written(name, servers, tiny_llama_dir, capsys):
    example = EXAMPLES[name]
    code, live = example.code, None
    if example.server is None:
        assert MODEL_PATH in code
        code = code.replace(MODEL_PATH, tiny_llama_dir)
    else:
        live = servers(example.server)
        assert any(address in code for address in live.addresses)
        for readme, actual in live.addresses.items():
            code = code.replace(readme, actual)
    namespace: dict = {}
    exec(compile(code, f"README.md ({name})", "exec"), namespace)
    CHECKS[name](namespace, capsys.readouterr().out, live)
