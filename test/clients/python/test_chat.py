"""Chat completions through the official `openai` Python client: plain, streamed (with and without
stream_options.include_usage), tool calls, reasoning usage, and exact billing after each call."""
from __future__ import annotations

import json

import jsonschema
import pytest

from gateway import HELLO, WEATHER_TOOL, cost_nano, sse_data


def test_a_chat_completion_answers_as_the_assistant_and_bills_exactly_price_times_usage(gateway, account, client):
    before = gateway.balance(account.key)
    raw = client.chat.completions.with_raw_response.create(model="sim-chat", messages=HELLO)
    completion = raw.parse()

    assert raw.status_code == 200
    assert raw.headers["x-request-id"].startswith("req_")
    assert completion.object == "chat.completion"
    assert completion.model == "sim-chat"
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert choice.finish_reason == "stop"
    usage = completion.usage
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens))


def test_a_chat_completion_body_matches_the_spec(client, spec):
    raw = client.chat.completions.with_raw_response.create(model="sim-chat", messages=HELLO)
    spec.assert_valid("CreateChatCompletionResponse", raw.http_response.json())


def test_the_alias_tollgate_27b_answers_and_bills_at_sim_chat_prices(gateway, account, client):
    before = gateway.balance(account.key)
    completion = client.chat.completions.create(model="tollgate-27b", messages=HELLO)
    assert completion.choices[0].message.content
    usage = completion.usage
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens))


def test_max_tokens_cuts_the_answer_and_bills_only_what_was_produced(gateway, account, client):
    before = gateway.balance(account.key)
    completion = client.chat.completions.create(model="sim-chat", messages=HELLO, max_tokens=3)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 3
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", completion.usage.prompt_tokens, 3))


def test_a_streamed_chat_without_include_usage_sends_no_usage_chunk_but_is_still_billed(gateway, account, client):
    before = gateway.balance(account.key)
    chunks = list(client.chat.completions.create(model="sim-chat", messages=HELLO, stream=True))

    assert len(chunks) > 2
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.usage is None for c in chunks), "a usage chunk reached a client that did not ask for one"
    assert all(len(c.choices) == 1 for c in chunks), "a chunk with no choices reached the client"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text.strip()
    after_first = gateway.settled_balance(account.key, before)

    # The client never saw usage; the simulated upstream is deterministic, so the same stream with
    # include_usage tells what the first one produced, and both must cost exactly that.
    again = list(client.chat.completions.create(
        model="sim-chat", messages=HELLO, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in again if c.choices) == text
    usage = again[-1].usage
    expected = cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens)
    gateway.assert_debited(account.key, after_first, expected)
    assert before - after_first == gateway.dollars(expected)


def test_a_streamed_chat_with_include_usage_ends_with_exactly_one_usage_chunk_with_no_choices(gateway, account, client):
    before = gateway.balance(account.key)
    chunks = list(client.chat.completions.create(
        model="sim-chat", messages=HELLO, stream=True, stream_options={"include_usage": True}))

    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1, f"{len(with_usage)} chunks carried usage"
    last = chunks[-1]
    assert last is with_usage[0], "the usage chunk is not the last one"
    assert last.choices == []
    assert all(c.choices for c in chunks[:-1]), "only the usage chunk may have empty choices"
    assert chunks[-2].choices[0].finish_reason == "stop"
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    assert text.strip()
    usage = last.usage
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens))


@pytest.mark.parametrize("include_usage", [False, True], ids=["without-include-usage", "with-include-usage"])
def test_every_streamed_chat_chunk_matches_the_spec(client, spec, include_usage):
    extra = {"stream_options": {"include_usage": True}} if include_usage else {}
    with client.chat.completions.with_streaming_response.create(
            model="sim-chat", messages=HELLO, stream=True, **extra) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = list(sse_data(response.iter_lines()))
    assert chunks
    for chunk in chunks:
        spec.assert_valid("CreateChatCompletionStreamResponse", chunk)
    assert any(c.get("usage") for c in chunks) is include_usage


def test_a_function_tool_comes_back_as_a_tool_call_whose_arguments_are_json_for_its_schema(gateway, account, client, spec):
    before = gateway.balance(account.key)
    raw = client.chat.completions.with_raw_response.create(
        model="sim-chat", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL])
    spec.assert_valid("CreateChatCompletionResponse", raw.http_response.json())
    completion = raw.parse()

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls and len(calls) == 1
    call = calls[0]
    assert call.type == "function" and call.id
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER_TOOL["function"]["parameters"])
    usage = completion.usage
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens))


def test_a_streamed_tool_call_assembles_into_json_arguments_for_its_schema(gateway, account, client):
    before = gateway.balance(account.key)
    chunks = list(client.chat.completions.create(
        model="sim-chat", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL], stream=True, stream_options={"include_usage": True}))

    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                if delta.function:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    assert list(calls) == [0]
    assert calls[0]["id"] and calls[0]["name"] == "get_weather"
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER_TOOL["function"]["parameters"])
    finishes = [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason]
    assert finishes == ["tool_calls"]
    usage = chunks[-1].usage
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens))


def test_a_streamed_tool_call_chunks_match_the_spec(client, spec):
    with client.chat.completions.with_streaming_response.create(
            model="sim-chat", messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[WEATHER_TOOL], stream=True) as response:
        chunks = list(sse_data(response.iter_lines()))
    assert any(c["choices"] and c["choices"][0]["delta"].get("tool_calls") for c in chunks)
    for chunk in chunks:
        spec.assert_valid("CreateChatCompletionStreamResponse", chunk)


def test_the_reasoner_reports_reasoning_tokens_and_bills_them_once_as_output(gateway, account, client, spec):
    before = gateway.balance(account.key)
    raw = client.chat.completions.with_raw_response.create(model="sim-reasoner", messages=HELLO)
    spec.assert_valid("CreateChatCompletionResponse", raw.http_response.json())
    completion = raw.parse()
    usage = completion.usage
    assert completion.choices[0].message.content
    assert usage.completion_tokens_details is not None
    reasoning = usage.completion_tokens_details.reasoning_tokens
    assert 0 < reasoning < usage.completion_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    gateway.assert_debited(account.key, before, cost_nano("sim-reasoner", usage.prompt_tokens, usage.completion_tokens))


def test_modalities_text_only_is_accepted(client):
    completion = client.chat.completions.create(model="sim-chat", messages=HELLO, modalities=["text"])
    assert completion.choices[0].message.content
