"""Refusals as the official client surfaces them: typed exceptions with the OpenAI error fields, bodies
matching the spec's ErrorResponse, and nothing billed for a refused request."""
from __future__ import annotations

import json
import secrets
import string
import time

import openai
import pytest

from gateway import HELLO

CHAT_REJECTED = [
    pytest.param("audio", {"audio": {"voice": "alloy", "format": "wav"}}, id="audio"),
    pytest.param("prediction", {"prediction": {"type": "content", "content": "Hello gateway"}}, id="prediction"),
    pytest.param("web_search_options", {"web_search_options": {}}, id="web_search_options"),
    pytest.param("functions", {"functions": [{"name": "get_weather", "parameters": {"type": "object"}}]},
                 id="functions"),
    pytest.param("function_call", {"function_call": "auto"}, id="function_call"),
    pytest.param("modalities", {"modalities": ["text", "audio"]}, id="modalities-text-audio"),
    pytest.param("modalities", {"modalities": ["audio"]}, id="modalities-audio"),
]

RESPONSES_REJECTED = [
    pytest.param("previous_response_id", {"previous_response_id": "resp_0123456789abcdef"}, id="previous_response_id"),
    pytest.param("conversation", {"conversation": "conv_0123456789abcdef"}, id="conversation"),
    pytest.param("background", {"background": True}, id="background-true"),
    pytest.param("prompt_cache_key", {"prompt_cache_key": "tollgate-test"}, id="prompt_cache_key"),
]


@pytest.mark.parametrize(("param", "kwargs"), CHAT_REJECTED)
def test_chat_refuses_an_unsupported_parameter_naming_it(gateway, account, client, spec, param, kwargs):
    before = gateway.balance(account.key)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="sim-chat", messages=HELLO, **kwargs)
    err = caught.value
    assert err.status_code == 400
    assert err.code == "unsupported_parameter"
    assert err.param == param
    assert param in err.message
    spec.assert_valid("ErrorResponse", err.response.json())
    gateway.assert_not_debited(account.key, before, settle_wait=0)


@pytest.mark.parametrize(("param", "kwargs"), RESPONSES_REJECTED)
def test_responses_refuses_an_unsupported_parameter_naming_it(gateway, account, client, spec, param, kwargs):
    before = gateway.balance(account.key)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="sim-chat", input="hi", **kwargs)
    err = caught.value
    assert err.code == "unsupported_parameter"
    assert err.param == param
    spec.assert_valid("ErrorResponse", err.response.json())
    gateway.assert_not_debited(account.key, before, settle_wait=0)


def test_responses_accepts_background_false_since_it_asks_for_nothing_unsupported(client):
    # `background: false` is the API's default (run in the foreground), which is what the gateway does;
    # by the same rule as `modalities: ["text"]`, only a value the gateway cannot honour is refused.
    response = client.responses.create(model="sim-chat", input="hi", background=False)
    assert response.status == "completed"
    assert response.background is False


def test_a_malformed_body_is_a_422_naming_the_bad_field(gateway, account, client, spec):
    before = gateway.balance(account.key)
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(model="sim-chat", messages="not a list")
    err = caught.value
    assert err.status_code == 422
    assert err.param == "messages"
    body = err.response.json()
    spec.assert_valid("ErrorResponse", body)
    assert body["detail"][0]["loc"] == ["body", "messages"]
    gateway.assert_not_debited(account.key, before, settle_wait=0)



@pytest.mark.parametrize(("kwargs", "param", "message"), [
    pytest.param({"temperature": 5}, "temperature", "`temperature` must be a number from 0 to 2; got 5.", id="temperature"),
    pytest.param({"n": 0}, "n", "`n` must be an integer from 1 to 128; got 0.", id="n"),
    pytest.param({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role",
                 "`messages[0].role` must be one of `system`, `developer`, `user`, `assistant`, `tool`, `function`; got \"robot\".",
                 id="role"),
])
def test_a_wrong_value_is_a_422_that_says_what_to_fix(gateway, account, client, spec, kwargs, param, message):
    before = gateway.balance(account.key)
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(**{"model": "sim-chat", "messages": HELLO, **kwargs})
    err = caught.value
    assert err.param == param
    assert err.code == "validation_error"
    assert err.body["message"] == message
    body = err.response.json()
    spec.assert_valid("ErrorResponse", body)
    assert body["detail"][0]["msg"] == message
    gateway.assert_not_debited(account.key, before, settle_wait=0)


def test_content_that_is_neither_text_nor_parts_is_refused_naming_it(gateway, account, client):
    before = gateway.balance(account.key)
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(model="sim-chat", messages=[{"role": "user", "content": {"text": "hi"}}])
    assert caught.value.param == "messages[0].content"
    assert caught.value.body["message"].endswith("; got an object.")
    gateway.assert_not_debited(account.key, before, settle_wait=0)


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_more_output_tokens_than_the_model_gives_is_a_400_naming_the_limit(gateway, account, client, spec, field):
    before = gateway.balance(account.key)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="sim-chat", messages=HELLO, **{field: 100_000})
    err = caught.value
    assert err.code == "invalid_value"
    assert err.param == field
    assert "at most 4096 output tokens" in err.body["message"]
    spec.assert_valid("ErrorResponse", err.response.json())
    gateway.assert_not_debited(account.key, before, settle_wait=0)

def test_an_unknown_chat_model_is_a_404_that_suggests_the_closest_model(gateway, account, client, spec):
    before = gateway.balance(account.key)
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="sim-chta", messages=HELLO)
    err = caught.value
    assert err.status_code == 404
    assert err.code == "model_not_found"
    assert err.param == "model"
    assert err.body["message"] == "The model `sim-chta` does not exist. Did you mean `sim-chat`?"
    spec.assert_valid("ErrorResponse", err.response.json())
    gateway.assert_not_debited(account.key, before, settle_wait=0)


@pytest.mark.parametrize(("call", "wrong", "right"), [
    ("embeddings", "sim-embd", "sim-embed"),
    ("responses", "sim-reasonr", "sim-reasoner"),
    ("models.retrieve", "sim-chatt", "sim-chat"),
])
def test_every_route_names_the_missing_model_and_suggests_one(client, spec, call, wrong, right):
    with pytest.raises(openai.NotFoundError) as caught:
        if call == "embeddings":
            client.embeddings.create(model=wrong, input="x")
        elif call == "responses":
            client.responses.create(model=wrong, input="x")
        else:
            client.models.retrieve(wrong)
    err = caught.value
    assert err.code == "model_not_found"
    assert err.body["message"] == f"The model `{wrong}` does not exist. Did you mean `{right}`?"
    spec.assert_valid("ErrorResponse", err.response.json())


def _random_key() -> str:
    return "svc_live_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(40))


@pytest.mark.parametrize("key", [_random_key(), "sk-not-a-tollgate-key"], ids=["unknown-tollgate-key", "foreign-key"])
def test_a_wrong_key_is_an_authentication_error(gateway, spec, key):
    client = gateway.client(key)
    with pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(model="sim-chat", messages=HELLO)
    err = caught.value
    assert err.status_code == 401
    assert err.code == "invalid_api_key"
    assert key not in err.message, "the error echoes the whole key"
    spec.assert_valid("ErrorResponse", err.response.json())


def test_a_revoked_key_is_refused_within_a_second_or_two(gateway, account, client):
    client.models.list()
    gateway.cli("key", "revoke", account.prefix)
    deadline = time.monotonic() + 3
    while True:
        try:
            client.models.list()
        except openai.AuthenticationError as err:
            assert err.code == "invalid_api_key"
            break
        assert time.monotonic() < deadline, "the revoked key still works after 3 s"
        time.sleep(0.1)


def test_an_account_with_no_credit_gets_402_insufficient_balance(gateway, spec):
    broke = gateway.account("0")
    client = gateway.client(broke.key)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="sim-chat", messages=HELLO)
    err = caught.value
    assert err.status_code == 402
    assert err.code == "insufficient_balance"
    spec.assert_valid("ErrorResponse", err.response.json())
    assert gateway.balance(broke.key) == 0


def test_a_key_past_its_spend_limit_gets_402_key_spend_limit_reached(gateway, spec):
    capped = gateway.account("5", spend_limit="0.000001", period="daily")
    client = gateway.client(capped.key)
    client.chat.completions.create(model="sim-chat", messages=HELLO)  # one output token alone costs more than the $0.000001 ceiling
    info = gateway.key_info(capped.key)
    assert info["limit_remaining"] == 0
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="sim-chat", messages=HELLO)
    err = caught.value
    assert err.status_code == 402
    assert err.code == "key_spend_limit_reached"
    spec.assert_valid("ErrorResponse", err.response.json())


def test_a_key_over_its_rpm_gets_a_rate_limit_error_with_retry_after_and_nothing_billed(gateway, spec):
    limited = gateway.account("5", rpm=1)
    # The balance is read through another key of the account: every request with a key counts against
    # its rpm, key inspection included.
    watcher = gateway.cli("key", "create", "--account", limited.account_id)["key"]
    client = gateway.client(limited.key)
    client.chat.completions.create(model="sim-chat", messages=HELLO)
    before = gateway.balance(watcher)
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="sim-chat", messages=HELLO)
    err = caught.value
    assert err.status_code == 429
    assert err.code == "rate_limit_exceeded"
    headers = err.response.headers
    assert int(headers["retry-after"]) > 0
    assert headers["x-ratelimit-limit-requests"] == "1"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"]
    spec.assert_valid("ErrorResponse", err.response.json())
    status, _, body = gateway.http("GET", "/svc/v1/key", limited.key)
    assert status == 429 and json.loads(body)["error"]["code"] == "rate_limit_exceeded", "unbilled requests count against rpm too"
    gateway.assert_not_debited(watcher, before)
