"""The Responses API (translated to chat by the gateway) through the official client, plain and
streamed, with exact billing on input_tokens/output_tokens and the bodies checked against the spec."""
from __future__ import annotations

import json

import pytest

from gateway import cost_nano, sse_data

PROMPT = "Write one sentence about toll roads."


def test_a_response_has_output_text_and_usage_and_bills_exactly_price_times_usage(gateway, account, client):
    before = gateway.balance(account.key)
    response = client.responses.create(model="sim-chat", input=PROMPT)

    assert response.object == "response"
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.model == "sim-chat"
    assert response.output_text.strip()
    message = response.output[0]
    assert message.type == "message" and message.role == "assistant"
    usage = response.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.input_tokens, usage.output_tokens))


def test_instructions_and_message_list_input_are_accepted(client):
    response = client.responses.create(
        model="sim-chat", instructions="Answer briefly.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": PROMPT}]}])
    assert response.status == "completed"
    assert response.instructions == "Answer briefly."
    assert response.output_text.strip()


def test_a_response_cut_by_max_output_tokens_is_incomplete_and_bills_what_was_produced(gateway, account, client):
    before = gateway.balance(account.key)
    response = client.responses.create(model="sim-chat", input=PROMPT, max_output_tokens=4)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 4
    assert response.output_text.strip()
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", response.usage.input_tokens, 4))


@pytest.mark.parametrize("kwargs", [
    pytest.param({"model": "sim-chat"}, id="completed"),
    pytest.param({"model": "sim-chat", "max_output_tokens": 4}, id="incomplete"),
    pytest.param({"model": "sim-reasoner"}, id="reasoner"),
])
def test_a_response_body_matches_the_spec(client, spec, kwargs):
    raw = client.responses.with_raw_response.create(input=PROMPT, **kwargs)
    spec.assert_valid("Response", raw.http_response.json())


def test_a_streamed_response_sends_created_deltas_and_completed_and_bills_the_completed_usage(gateway, account, client):
    before = gateway.balance(account.key)
    events = list(client.responses.create(model="sim-chat", input=PROMPT, stream=True))

    types = [e.type for e in events]
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    assert types.count("response.completed") == 1
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text.strip()
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1 and done[0].text == text
    completed = events[-1].response
    assert completed.status == "completed"
    assert completed.id == events[0].response.id
    assert completed.output_text == text
    usage = completed.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.input_tokens, usage.output_tokens))


def test_every_streamed_response_event_matches_its_schema_in_the_spec(client, spec):
    with client.responses.with_streaming_response.create(model="sim-chat", input=PROMPT, stream=True) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(sse_data(response.iter_lines()))
    assert events and events[-1]["type"] == "response.completed"
    for event in events:
        spec.assert_valid_response_event(event)


def test_the_reasoner_reports_reasoning_tokens_in_a_response_and_bills_them_once(gateway, account, client):
    before = gateway.balance(account.key)
    response = client.responses.create(model="sim-reasoner", input=PROMPT)
    usage = response.usage
    assert response.output_text.strip()
    assert 0 < usage.output_tokens_details.reasoning_tokens < usage.output_tokens
    gateway.assert_debited(account.key, before, cost_nano("sim-reasoner", usage.input_tokens, usage.output_tokens))


def test_a_streamed_response_cut_by_max_output_tokens_ends_with_response_incomplete(gateway, account, client):
    before = gateway.balance(account.key)
    events = list(client.responses.create(model="sim-chat", input=PROMPT, stream=True, max_output_tokens=4))
    types = [e.type for e in events]
    assert types[-1] == "response.incomplete"
    assert "response.completed" not in types
    final = events[-1].response
    assert final.status == "incomplete"
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage.output_tokens == 4
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", final.usage.input_tokens, 4))


WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_a_streamed_response_with_a_function_tool_streams_the_call_and_bills_the_completed_usage(gateway, account, client, spec):
    before = gateway.balance(account.key)
    with client.responses.with_streaming_response.create(
            model="sim-chat", input="What is the weather in Paris?", tools=[WEATHER_TOOL], stream=True) as raw:
        raw_events = list(sse_data(raw.iter_lines()))
    for event in raw_events:
        spec.assert_valid_response_event(event)
    events = list(client.responses.create(model="sim-chat", input="What is the weather in Paris?", tools=[WEATHER_TOOL], stream=True))

    for evs in (raw_events, [e.model_dump() for e in events]):
        types = [e["type"] for e in evs]
        assert types[-1] == "response.completed"
        assert "response.function_call_arguments.delta" in types
        args = "".join(e["delta"] for e in evs if e["type"] == "response.function_call_arguments.delta")
        done = [e for e in evs if e["type"] == "response.function_call_arguments.done"]
        assert len(done) == 1 and done[0]["arguments"] == args
        assert isinstance(json.loads(args)["city"], str)
        call = [o for o in evs[-1]["response"]["output"] if o["type"] == "function_call"]
        assert len(call) == 1 and call[0]["name"] == "get_weather" and call[0]["arguments"] == args
        assert call[0]["call_id"].startswith("call")

    usages = [evs[-1]["response"]["usage"] for evs in (raw_events, [e.model_dump() for e in events])]
    gateway.assert_debited(account.key, before, sum(cost_nano("sim-chat", u["input_tokens"], u["output_tokens"]) for u in usages))
