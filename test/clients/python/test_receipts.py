"""Receipts with the official openai client: the cost in headers and in the streams' last usage (the client
still parses them), and a receipt's Ed25519 signature verified exactly as the README shows."""
from __future__ import annotations

import base64
import json
import time
from decimal import Decimal

import openai
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gateway import Account, Gateway, cost_nano


def receipt(gateway: Gateway, key: str, request_id: str) -> dict:
    """GET /svc/v1/requests/{id}, waiting the few milliseconds a stream's debit takes to land."""
    deadline = time.monotonic() + 5
    while True:
        status, _, body = gateway.http("GET", f"/svc/v1/requests/{request_id}", key)
        if status == 200 or time.monotonic() > deadline:
            assert status == 200, body[:300]
            return json.loads(body)
        time.sleep(0.1)


def check_signature(gateway: Gateway, signed: dict) -> None:
    """The README's verification, line for line."""
    _, _, raw = gateway.http("GET", "/svc/v1/receipts/key")
    key = json.loads(raw)
    public = Ed25519PublicKey.from_public_bytes(base64.b64decode(key["public_key"]))
    message = json.dumps(signed["receipt"], sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    public.verify(base64.b64decode(signed["signature"]["value"]), message)  # raises InvalidSignature if altered
    forged = json.dumps({**signed["receipt"], "cost": "0.000000001"}, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    try:
        public.verify(base64.b64decode(signed["signature"]["value"]), forged)
    except InvalidSignature:
        pass
    else:
        raise AssertionError("a changed receipt must not verify")


def nine(nano: int) -> str:
    return f"{Decimal(nano) / Decimal(10**9):.9f}"


def test_buffered_chat_carries_its_cost_and_a_signed_receipt(gateway: Gateway, client: openai.OpenAI, account: Account) -> None:
    raw = client.chat.completions.with_raw_response.create(model="sim-chat", messages=[{"role": "user", "content": "Hello receipts"}])
    completion = raw.parse()
    expected = cost_nano("sim-chat", completion.usage.prompt_tokens, completion.usage.completion_tokens)
    assert raw.headers["x-tollgate-cost"] == nine(expected)
    signed = receipt(gateway, account.key, raw.headers["x-request-id"])
    check_signature(gateway, signed)
    r = signed["receipt"]
    assert r["cost"] == nine(expected)
    assert r["key_prefix"] == account.prefix
    assert r["units"] == {"input_tokens": completion.usage.prompt_tokens, "output_tokens": completion.usage.completion_tokens}
    assert r["outcome"] == "complete"


def test_streams_carry_the_cost_in_their_last_usage_and_the_client_parses_it(gateway: Gateway, client: openai.OpenAI, account: Account) -> None:
    with client.chat.completions.with_streaming_response.create(
        model="sim-chat", messages=[{"role": "user", "content": "Stream please"}], stream=True, stream_options={"include_usage": True},
    ) as res:
        request_id = res.headers["x-request-id"]
        chunks = list(res.parse())
    usage = chunks[-1].usage
    cost = Decimal(str(usage.model_extra["cost"]))
    assert cost == Decimal(nine(cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens)))
    signed = receipt(gateway, account.key, request_id)
    check_signature(gateway, signed)
    assert Decimal(signed["receipt"]["cost"]) == cost

    events = list(client.responses.create(model="sim-chat", input="A responses stream", stream=True))
    done = events[-1]
    assert done.type == "response.completed"
    u = done.response.usage
    assert Decimal(str(u.model_extra["cost"])) == Decimal(nine(cost_nano("sim-chat", u.input_tokens, u.output_tokens)))


def test_a_receipt_is_404_to_another_account(gateway: Gateway, client: openai.OpenAI, account: Account) -> None:
    raw = client.chat.completions.with_raw_response.create(model="sim-chat", messages=[{"role": "user", "content": "Mine"}])
    other = gateway.account("1")
    status, _, _ = gateway.http("GET", f"/svc/v1/requests/{raw.headers['x-request-id']}", other.key)
    assert status == 404
