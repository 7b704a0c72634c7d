"""Shared fixtures: tiny random Llama checkpoints (built by agentix_testing/tiny_llama.py) as HF
directories, and the Triton interpreter switch for CPU machines."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from agentix_testing.tiny_llama import (GreedyReference, build_tiny_llama, save_byte_tokenizer,
                                        save_word_tokenizer)

if not torch.cuda.is_available():
    # Triton kernels run under the interpreter on CPU machines; this must be set before any
    # test imports triton. On a GPU the same tests run compiled for real.
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session", params=["tied", "untied"])
def tiny_llama(request, tmp_path_factory):
    """(model_dir, transformers model) for a tiny GQA Llama with Llama-3 RoPE scaling."""
    path = tmp_path_factory.mktemp(f"tiny-llama-{request.param}")
    model = build_tiny_llama(path, tie_word_embeddings=request.param == "tied")
    return str(path), model


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """A tied tiny Llama with a word-level tokenizer, for tests that need no reference."""
    path = tmp_path_factory.mktemp("tiny-llama-plain")
    build_tiny_llama(path, tie_word_embeddings=True)
    save_word_tokenizer(path)
    return str(path)


@pytest.fixture(scope="session")
def byte_llama(tmp_path_factory):
    """(model_dir, transformers model): a tied tiny Llama with a byte-level tokenizer (any
    text can be spelled: the constrained decoding tests)."""
    path = tmp_path_factory.mktemp("tiny-llama-bytes")
    model = build_tiny_llama(path, tie_word_embeddings=True)
    save_byte_tokenizer(path)
    return str(path), model


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny matrices: one thread is faster than several sharing a few cores (for a module:
    `pytestmark = pytest.mark.usefixtures("one_torch_thread")`)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_tied_llama(tmp_path_factory):
    """(model_dir, transformers model): one tied tiny Llama, shared by the modules that
    compare the host tier's and failed steps' tokens with transformers."""
    path = tmp_path_factory.mktemp("tiny-llama-tied")
    return str(path), build_tiny_llama(path, tie_word_embeddings=True)


@pytest.fixture(scope="session")
def tiny_llama_greedy(tiny_llama):
    """transformers' greedy answers of `tiny_llama`'s model, cached for the session."""
    return GreedyReference(tiny_llama[1])


@pytest.fixture(scope="session")
def tiny_tied_greedy(tiny_tied_llama):
    """transformers' greedy answers of `tiny_tied_llama`'s model, cached for the session."""
    return GreedyReference(tiny_tied_llama[1])
