"""Structured Outputs through the official `openai` Python client against the embedded default: `parse()` with a
pydantic model (chat, streamed chat and responses) gets an instance back, json_object gets a JSON object, and
each is billed exactly price x usage."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Literal, Optional

import jsonschema
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

from gateway import cost_nano


class Person(BaseModel):
    name: str
    age: int = Field(ge=18, le=99)


class CalendarEvent(BaseModel):
    title: str
    when: datetime
    kind: Literal["meeting", "call"]
    participants: list[Person]
    note: Optional[str]


PLAN = [{"role": "user", "content": "Alice and Bob meet on Friday. Extract the event."}]


def test_chat_completions_parse_returns_the_pydantic_model_and_bills_it(gateway, account, client):
    before = gateway.balance(account.key)
    completion = client.chat.completions.parse(model="sim-chat", messages=PLAN, response_format=CalendarEvent)
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, CalendarEvent)
    assert message.parsed.participants and all(18 <= p.age <= 99 for p in message.parsed.participants)
    jsonschema.validate(json.loads(message.content), to_strict_json_schema(CalendarEvent))
    usage = completion.usage
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens))


def test_a_streamed_parse_assembles_the_same_model(client):
    whole = client.chat.completions.parse(model="sim-chat", messages=PLAN, response_format=CalendarEvent)
    with client.chat.completions.stream(model="sim-chat", messages=PLAN, response_format=CalendarEvent) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.parsed == whole.choices[0].message.parsed


def test_responses_parse_returns_the_pydantic_model_and_bills_it(gateway, account, client):
    before = gateway.balance(account.key)
    response = client.responses.parse(model="sim-chat", input=PLAN[0]["content"], text_format=CalendarEvent)
    assert response.status == "completed"
    assert isinstance(response.output_parsed, CalendarEvent)
    usage = response.usage
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.input_tokens, usage.output_tokens))


def test_json_object_mode_answers_with_a_json_object(client):
    completion = client.chat.completions.create(model="sim-chat", messages=[{"role": "user", "content": "Answer in JSON."}],
                                                response_format={"type": "json_object"})
    assert isinstance(json.loads(completion.choices[0].message.content), dict)
