"""vLLM's token endpoints on the HTTP door, on the tiny model's word tokenizer: /tokenize of a
prompt and of chat messages (the chat template's ids, as transformers renders them), with
the token strings; /detokenize back to text; the 400s naming the field and the 404."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from grpc_helpers import server_config
from transformers import AutoTokenizer

from server.app import start_server

MESSAGES = [{"role": "user", "content": "w30 w31 w32"}]


@pytest.fixture(scope="module")
def http_server(tiny_llama_dir):
    server = start_server(server_config(tiny_llama_dir), port=None, http_port=0,
                          served_model_name="tiny")
    yield server
    server.stop(grace=0)


def post(server, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{server.http_address}{path}",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_tokenize_a_prompt_with_its_token_strings(http_server, tiny_llama_dir):
    status, body = post(http_server, "/tokenize", {"model": "tiny", "prompt": "w5 w17 w9",
                                                   "return_token_strs": True})
    ids = AutoTokenizer.from_pretrained(tiny_llama_dir)("w5 w17 w9")["input_ids"]
    assert status == 200
    with urllib.request.urlopen(f"http://{http_server.http_address}/v1/models") as models:
        max_model_len = json.loads(models.read())["data"][0]["max_model_len"]
    assert body == {"count": 3, "max_model_len": max_model_len, "tokens": ids,
                    "token_strs": ["w5", "w17", "w9"]}
    assert ids == [5, 17, 9]


def test_tokenize_messages_renders_the_chat_template(http_server, tiny_llama_dir):
    status, body = post(http_server, "/tokenize", {"messages": MESSAGES})
    ids = AutoTokenizer.from_pretrained(tiny_llama_dir).apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert status == 200 and body["tokens"] == ids and body["count"] == len(ids)
    assert "token_strs" not in body


def test_detokenize_gives_the_text_back(http_server):
    status, body = post(http_server, "/detokenize", {"tokens": [5, 17, 9]})
    assert (status, body) == (200, {"prompt": "w5 w17 w9"})


@pytest.mark.parametrize("path, body, status, param", [
    ("/tokenize", {"prompt": "w5", "messages": MESSAGES}, 400, "prompt"),
    ("/tokenize", {}, 400, "prompt"),
    ("/tokenize", {"messages": MESSAGES, "add_generation_prompt": False}, 400,
     "add_generation_prompt"),
    ("/tokenize", {"prompt": ""}, 400, "prompt"),
    ("/tokenize", {"prompt": "w5", "model": "other"}, 404, "model"),
    ("/detokenize", {"tokens": [5, 100000]}, 400, "tokens"),
    ("/detokenize", {"tokens": []}, 400, "tokens"),
])
def test_bad_requests_name_the_field(http_server, path, body, status, param):
    got, answer = post(http_server, path, body)
    assert got == status and answer["error"]["param"] == param, answer
