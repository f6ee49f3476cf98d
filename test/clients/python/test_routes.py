"""The OpenAI shape is served under /alpha/v1 and under its alias /v1, to the same effect."""
from __future__ import annotations

import pytest

from gateway import HELLO, cost_nano


@pytest.mark.parametrize("base", ["/v1", "/alpha/v1"])
def test_a_client_pointed_at_either_base_url_chats_lists_models_and_is_billed(gateway, account, base):
    client = gateway.client(account.key, base)
    assert str(client.base_url).rstrip("/").endswith(base)
    before = gateway.balance(account.key)
    raw = client.chat.completions.with_raw_response.create(model="sim-chat", messages=HELLO)
    assert str(raw.http_request.url) == f"{gateway.url}{base}/chat/completions"
    completion = raw.parse()
    assert completion.choices[0].message.content
    usage = completion.usage
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens))
    assert sorted(m.id for m in client.models.list()) == ["sim-chat", "sim-embed", "sim-realtime", "sim-reasoner", "sim-sts", "sim-stt", "sim-tts", "sim-tts-clone"]
    assert client.embeddings.create(model="sim-embed", input="alias").data[0].embedding


def test_both_base_urls_give_the_same_answer_to_the_same_request(gateway, account):
    answers = {
        base: gateway.client(account.key, base).chat.completions.create(
            model="sim-chat", messages=HELLO, max_tokens=16).choices[0].message.content
        for base in ("/v1", "/alpha/v1")
    }
    assert answers["/v1"] == answers["/alpha/v1"]
