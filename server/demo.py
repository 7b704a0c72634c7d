"""`agentix demo`: a server on SmolLM2-135M-Instruct with the engine's default configuration
(`EngineConfig`'s: policy, prefix cache, preemption, first-token deadline), and three small
agent programs running against it at once over gRPC:

- a ReAct-style loop whose model output goes through a real local calculator tool;
- a fan-out/join program: 4 parallel calls, then a call that combines their answers;
- a multi-turn chat.

Each program prints its calls, its answer and its process-table figures; then the server
shuts down cleanly.
"""

from __future__ import annotations

import ast
import operator
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from server.client import AgentixClient, Program

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
MAX_TOKENS = 48
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.Div: operator.truediv, ast.USub: operator.neg}


def chat_prompt(turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    """Chat messages for (role, content) turns after the demo's system prompt (the server
    renders them with the model's chat template, ready for the assistant)."""
    return [{"role": "system", "content": SYSTEM},
            *({"role": role, "content": content} for role, content in turns)]


def calculate(text: str) -> str:
    """The calculator tool: evaluates the first arithmetic expression in `text` (numbers
    joined by + - * / with parentheses; a lone number is not an expression), or says why it
    could not."""
    for candidate in re.findall(r"[\d(][\d\s+\-*/().]*", text):
        try:
            tree = ast.parse(candidate.strip(), mode="eval").body
            if isinstance(tree, ast.BinOp):
                return _format(_evaluate(tree))
        except (SyntaxError, ValueError, ZeroDivisionError):
            continue
    return "error: no arithmetic expression found"


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ValueError("not arithmetic")


def _format(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


def react_agent(prog: Program, log: Callable[[str], None]) -> str:
    question = "A shop sells 17 boxes with 23 pens each. How many pens is that?"
    turns = [("user", "Question: 2 bags with 5 apples each. How many apples?"),
             ("assistant", "2 * 5"), ("user", f"Question: {question}")]
    for step in range(3):
        thought = prog.generate(chat_prompt(turns), max_tokens=24).text.strip()
        observation = calculate(thought)
        log(f"call {step + 1}: model wrote {thought!r} -> calculator: {observation}")
        if not observation.startswith("error"):
            turns += [("assistant", thought), ("user", f"The calculator says {observation}. "
                                                       f"Answer the question in one sentence.")]
            return prog.generate(chat_prompt(turns), max_tokens=MAX_TOKENS).text.strip()
        turns += [("assistant", thought), ("user", "That was not an expression. Write only "
                                                   "an expression such as 17 * 23.")]
    return "(no answer: the model never wrote an expression)"


def fan_out_agent(prog: Program, log: Callable[[str], None]) -> str:
    topics = ["sleep", "exercise", "food", "focus"]
    tips = prog.generate_many([chat_prompt([("user", f"Give one short tip about {t}.")])
                               for t in topics], max_tokens=32)
    for topic, tip in zip(topics, tips):
        log(f"branch {topic!r}: {tip.text.strip()!r}")
    joined = "\n".join(f"- {t.text.strip()}" for t in tips)
    return prog.generate(chat_prompt([("user", f"Combine these tips into one sentence:\n"
                                               f"{joined}")]), max_tokens=MAX_TOKENS).text.strip()


def chat_agent(prog: Program, log: Callable[[str], None]) -> str:
    turns: list[tuple[str, str]] = []
    reply = ""
    for message in ("Hi! What is the capital of France?", "What is a famous tower there?",
                    "Thanks! Say goodbye in French."):
        turns.append(("user", message))
        reply = prog.generate(chat_prompt(turns), max_tokens=MAX_TOKENS).text.strip()
        turns.append(("assistant", reply))
        log(f"user: {message!r} -> {reply!r}")
    return reply


AGENTS = {"react": react_agent, "fan-out/join": fan_out_agent, "chat": chat_agent}


def run_agents(address: str) -> None:
    """Run the three agents at once against a server at `address`; print each program."""
    printer = threading.Lock()

    def run(name: str) -> None:
        lines: list[str] = []
        with AgentixClient(address) as client, client.program(tenant="demo") as prog:
            answer = AGENTS[name](prog, lines.append)
            info = prog.info()
        with printer:
            print(f"=== {name} program {prog.program_id}")
            for line in lines:
                print(f"  {line}")
            print(f"  answer: {answer}")
            print(f"  process table: calls={info['num_calls']} "
                  f"service={float(info['service']):.2f}s wait={float(info['wait']):.2f}s "
                  f"generated_tokens={info['generated_tokens']}\n", flush=True)

    with ThreadPoolExecutor(len(AGENTS)) as pool:
        for future in [pool.submit(run, name) for name in AGENTS]:
            future.result()


def main(model: str | None = None, dtype: str = "float32") -> None:
    from engine import EngineConfig
    from engine.models.smollm2 import ensure_smollm2_dir
    from server.app import start_server

    model = model or str(ensure_smollm2_dir())
    config = EngineConfig.from_flat(model=model, dtype=dtype, max_num_seqs=16,
                                    kv_cache_memory_gb=0.5)
    server = start_server(config, host="127.0.0.1", port=0)
    print(f"agentix demo: SmolLM2-135M-Instruct, policy {config.policy}, serving on "
          f"{server.address}\n", flush=True)
    try:
        run_agents(server.address)
    finally:
        server.stop()
    print("server stopped cleanly")
