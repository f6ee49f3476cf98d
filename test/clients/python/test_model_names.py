"""Replies name the model the client asked for (an alias: its model's id), never the upstream's name, through the
official `openai` Python client: chat, streamed chat, completions, embeddings and responses."""
from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway import HELLO, RENAMED_MODELS, Gateway, cost_nano


@pytest.fixture(scope="module")
def renamed() -> Iterator[Gateway]:
    gw = Gateway(RENAMED_MODELS).start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def key(renamed: Gateway) -> str:
    return renamed.account("5").key


@pytest.fixture
def rclient(renamed: Gateway, key: str) -> openai.OpenAI:
    return renamed.client(key)


@pytest.mark.parametrize("asked", ["gemma-3-27b-it", "gemma-27b"])
def test_a_chat_completion_names_the_model_asked_for_and_bills_it(renamed, key, rclient, asked):
    before = renamed.balance(key)
    completion = rclient.chat.completions.create(model=asked, messages=HELLO)
    assert completion.model == "gemma-3-27b-it"
    usage = completion.usage
    renamed.assert_debited(key, before, cost_nano("gemma-3-27b-it", usage.prompt_tokens, usage.completion_tokens))


@pytest.mark.parametrize("asked", ["gemma-3-27b-it", "gemma-27b"])
def test_every_streamed_chunk_names_the_model_asked_for(rclient, asked):
    chunks = list(rclient.chat.completions.create(
        model=asked, messages=HELLO, stream=True, stream_options={"include_usage": True}))
    assert len(chunks) > 3 and chunks[-1].usage is not None
    assert {c.model for c in chunks} == {"gemma-3-27b-it"}


def test_completions_embeddings_and_responses_name_the_model_asked_for(rclient):
    assert rclient.completions.create(model="gemma-27b", prompt="Once", max_tokens=4).model == "gemma-3-27b-it"
    streamed = list(rclient.completions.create(model="gemma-3-27b-it", prompt="Once", max_tokens=4, stream=True))
    assert {c.model for c in streamed} == {"gemma-3-27b-it"}
    assert rclient.embeddings.create(model="bge-m3", input=["one", "two"]).model == "bge-m3"
    assert rclient.responses.create(model="gemma-27b", input="Hi").model == "gemma-3-27b-it"
