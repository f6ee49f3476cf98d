"""Text through llama.cpp's own llama-server behind `tollgate serve --config`, with the official openai client.

The model is the suite's tiny random llama (make_model.py): it never ends a turn by itself, so every
reply runs to max_tokens, and with temperature 0 the same request gives the same tokens.
Every debit is checked to the nanodollar against the usage llama.cpp reported for the request.
"""
from __future__ import annotations

import json
import time
import urllib.request
from decimal import Decimal

import openai
import pytest

from conftest import MAX_OUTPUT, cost_nano
from gateway import Account, Gateway

HELLO = [{"role": "user", "content": "Say hello to the gateway."}]


def usage_of(chunks: list) -> list:
    return [c.usage for c in chunks if getattr(c, "usage", None)]


def test_chat_buffered_billed_by_llama_usage(llama_gateway: Gateway, account: Account, client: openai.OpenAI) -> None:
    before = llama_gateway.balance(account.key)
    r = client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=12, temperature=0)
    assert r.model == "tiny-llama"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content, "llama.cpp produced text"
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12 and r.usage.prompt_tokens > 0
    llama_gateway.assert_debited(account.key, before, cost_nano("tiny-llama", r.usage.prompt_tokens, 12))


def test_chat_reply_is_llamas_own(client: openai.OpenAI, direct: openai.OpenAI) -> None:
    """Greedy decoding: the text through Tollgate is the text llama-server gives when called directly."""
    via = client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=10, temperature=0)
    own = direct.chat.completions.create(model="x", messages=HELLO, max_tokens=10, temperature=0)
    assert via.choices[0].message.content == own.choices[0].message.content
    assert via.usage.prompt_tokens == own.usage.prompt_tokens


def test_chat_streamed_with_usage(llama_gateway: Gateway, account: Account, client: openai.OpenAI) -> None:
    before = llama_gateway.balance(account.key)
    chunks = list(client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=9, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert all(c.model == "tiny-llama" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    usages = usage_of(chunks)
    assert len(usages) == 1, "one usage chunk, as the client asked"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 9
    llama_gateway.assert_debited(account.key, before, cost_nano("tiny-llama", usages[0].prompt_tokens, 9))


def test_chat_streamed_without_usage_still_billed(llama_gateway: Gateway, account: Account, client: openai.OpenAI,
                                                  direct: openai.OpenAI) -> None:
    """Tollgate asks llama.cpp for usage, bills it, and does not hand the client a chunk it did not ask for."""
    prompt = direct.chat.completions.create(model="x", messages=HELLO, max_tokens=1).usage.prompt_tokens
    before = llama_gateway.balance(account.key)
    chunks = list(client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=7, stream=True))
    assert usage_of(chunks) == []
    assert all(c.choices for c in chunks)
    llama_gateway.assert_debited(account.key, before, cost_nano("tiny-llama", prompt, 7))


def test_completions_buffered(llama_gateway: Gateway, account: Account, client: openai.OpenAI) -> None:
    before = llama_gateway.balance(account.key)
    r = client.completions.create(model="tiny-llama", prompt="The gate opens and", max_tokens=6, temperature=0)
    assert r.model == "tiny-llama" and r.choices[0].text
    assert r.usage.completion_tokens == 6
    llama_gateway.assert_debited(account.key, before, cost_nano("tiny-llama", r.usage.prompt_tokens, 6))


@pytest.mark.parametrize("include_usage", [True, False])
def test_completions_streamed_usage_on_finish_chunk(llama_gateway: Gateway, account: Account, client: openai.OpenAI,
                                                    direct: openai.OpenAI, include_usage: bool) -> None:
    """llama.cpp puts a completions stream's usage on its finish chunk, not on a chunk of its own: the meter takes
    it from there (exact), a client that asked for usage gets that chunk as llama.cpp sent it, and a client that
    did not gets it without the usage."""
    prompt = direct.completions.create(model="x", prompt="The gate opens and", max_tokens=1).usage.prompt_tokens
    before = llama_gateway.balance(account.key)
    opts = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(client.completions.create(model="tiny-llama", prompt="The gate opens and", max_tokens=5,
                                            temperature=0, stream=True, **opts))
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    usages = usage_of(chunks)
    if include_usage:
        assert len(usages) == 1 and usages[0].prompt_tokens == prompt and usages[0].completion_tokens == 5
        assert [c.choices[0].finish_reason for c in chunks if c.usage] == ["length"]
    else:
        assert usages == [], "no usage the client did not ask for"
    llama_gateway.assert_debited(account.key, before, cost_nano("tiny-llama", prompt, 5))


def test_embeddings(llama_gateway: Gateway, account: Account, client: openai.OpenAI) -> None:
    before = llama_gateway.balance(account.key)
    r = client.embeddings.create(model="tiny-embed", input=["the toll gate", "a meter"])
    assert r.model == "tiny-embed"
    assert [d.index for d in r.data] == [0, 1]
    assert len(r.data[0].embedding) == 64 and r.data[0].embedding != r.data[1].embedding
    assert r.usage.prompt_tokens > 0
    llama_gateway.assert_debited(account.key, before, cost_nano("tiny-embed", r.usage.prompt_tokens))


def test_embeddings_base64(client: openai.OpenAI) -> None:
    """The openai client asks for base64 by default when numpy is present; a float list works either way."""
    r = client.embeddings.create(model="tiny-embed", input="hello", encoding_format="float")
    assert len(r.data[0].embedding) == 64


def test_chat_n2_streamed_billed_for_both_choices(llama_gateway: Gateway, account: Account, client: openai.OpenAI) -> None:
    """With n=2 llama.cpp runs one task per choice and reports each task's usage in a chunk of its own: the
    bill is their sum (both choices' output), not the last report."""
    before = llama_gateway.balance(account.key)
    chunks = list(client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=4, n=2,
                                                 stream=True, stream_options={"include_usage": True}))
    per_choice: dict[int, str] = {}
    for c in chunks:
        for ch in c.choices:
            per_choice[ch.index] = per_choice.get(ch.index, "") + (ch.delta.content or "")
    assert sorted(per_choice) == [0, 1] and all(per_choice.values())
    usages = usage_of(chunks)
    assert usages and sum(u.completion_tokens for u in usages) == 8
    billed = cost_nano("tiny-llama", sum(u.prompt_tokens for u in usages), sum(u.completion_tokens for u in usages))
    llama_gateway.assert_debited(account.key, before, billed)


def test_chat_n2_buffered_billed_for_every_task(llama_gateway: Gateway, account: Account, client: openai.OpenAI,
                                               direct: openai.OpenAI) -> None:
    """llama.cpp runs one task per choice, but its whole (non-streamed) reply has one `usage` block that counts one
    task only: for two 5-token choices it says 5 completion tokens, and one prompt for the two the slots read. Billing
    that under-bills by a whole choice. With `usage_per_task` Tollgate asks for a stream (which reports every task),
    builds the whole reply from it, and bills and reports both tasks."""
    own = direct.chat.completions.create(model="x", messages=HELLO, max_tokens=5, n=2, temperature=0)
    assert [c.index for c in own.choices] == [0, 1]
    assert own.usage.completion_tokens == 5, "llama.cpp's own whole reply counts one task"
    prompt = own.usage.prompt_tokens
    before = llama_gateway.balance(account.key)
    r = client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=5, n=2, temperature=0)
    assert r.model == "tiny-llama" and r.object == "chat.completion"
    assert [c.index for c in r.choices] == [0, 1]
    # Greedy decoding: the same text llama.cpp answers whole, choice by choice.
    assert [(c.message.role, c.message.content, c.finish_reason) for c in r.choices] == \
        [(c.message.role, c.message.content, c.finish_reason) for c in own.choices]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (2 * prompt, 10, 2 * prompt + 10)
    llama_gateway.assert_debited(account.key, before, cost_nano("tiny-llama", 2 * prompt, 10))


PROMPTS = ["The gate opens and", "hello there friend, the toll is"]


def test_completions_prompt_list_buffered_billed_for_every_prompt(llama_gateway: Gateway, account: Account,
                                                                  client: openai.OpenAI, direct: openai.OpenAI) -> None:
    """A list of prompts is one task each; llama.cpp's whole reply counts one of them. Billed: every prompt's tokens
    (as llama.cpp counts each on its own) and every choice's output."""
    prompts = [direct.completions.create(model="x", prompt=p, max_tokens=1).usage.prompt_tokens for p in PROMPTS]
    assert prompts[0] != prompts[1]
    own = direct.completions.create(model="x", prompt=PROMPTS, max_tokens=4, temperature=0)
    assert own.usage.completion_tokens == 4, "llama.cpp's own whole reply counts one task"
    before = llama_gateway.balance(account.key)
    r = client.completions.create(model="tiny-llama", prompt=PROMPTS, max_tokens=4, temperature=0)
    assert r.object == "text_completion" and [c.index for c in r.choices] == [0, 1]
    assert [c.text for c in r.choices] == [c.text for c in own.choices]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (sum(prompts), 8)
    llama_gateway.assert_debited(account.key, before, cost_nano("tiny-llama", sum(prompts), 8))


def test_completions_prompt_list_streamed(llama_gateway: Gateway, account: Account, client: openai.OpenAI,
                                          direct: openai.OpenAI) -> None:
    """Streamed, llama.cpp opens a list of prompts with `data: null` (the meter used to fail on it) and reports
    each prompt's usage on its finish chunk: the bill is their sum."""
    prompts = [direct.completions.create(model="x", prompt=p, max_tokens=1).usage.prompt_tokens for p in PROMPTS]
    before = llama_gateway.balance(account.key)
    chunks = [c for c in client.completions.create(model="tiny-llama", prompt=PROMPTS, max_tokens=3, stream=True,
                                                   stream_options={"include_usage": True}) if c is not None]
    assert sorted({ch.index for c in chunks for ch in c.choices}) == [0, 1]
    usages = usage_of(chunks)
    assert sum(u.completion_tokens for u in usages) == 6 and sum(u.prompt_tokens for u in usages) == sum(prompts)
    llama_gateway.assert_debited(account.key, before, cost_nano("tiny-llama", sum(prompts), 6))


def test_stop_sequence(client: openai.OpenAI) -> None:
    """`stop` reaches llama.cpp: the greedy reply is cut just before the stop text."""
    full = client.completions.create(model="tiny-llama", prompt="The gate opens and", max_tokens=16, temperature=0)
    text = full.choices[0].text
    assert len(text) > 6
    stop = text[len(text) // 2: len(text) // 2 + 2]
    cut = client.completions.create(model="tiny-llama", prompt="The gate opens and", max_tokens=16, temperature=0,
                                    stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[: text.index(stop)]
    assert cut.usage.completion_tokens < 16


def test_client_dropping_a_stream_is_billed_for_what_was_produced(llama_gateway: Gateway, account: Account,
                                                                     direct: openai.OpenAI) -> None:
    """A client that leaves a stream after a few chunks pays for the prompt and the chunks produced, not max_tokens.
    The prompt is llama.cpp's own count, from the `prompt_progress` report Tollgate asks for (`prompt_progress: true`
    in the upstream's config), which comes before any output: Tollgate's estimate for this prompt is 12 tokens, llama's 35."""
    prompt = direct.chat.completions.create(model="x", messages=HELLO, max_tokens=1).usage.prompt_tokens
    before = llama_gateway.balance(account.key)
    body = json.dumps({"model": "tiny-llama", "messages": HELLO, "max_tokens": MAX_OUTPUT, "stream": True}).encode()
    req = urllib.request.Request(llama_gateway.url + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {account.key}", "Content-Type": "application/json"})
    res = urllib.request.urlopen(req, timeout=30)
    got = 0
    for line in res:
        assert b"prompt_progress" not in line, "progress the client did not ask for is not passed on"
        if line.startswith(b"data: {") and b'"content":"' in line:
            got += 1
            if got == 3:
                break
    res.close()
    after = llama_gateway.settled_balance(account.key, before)
    moved = before - after
    assert moved >= Gateway.dollars(cost_nano("tiny-llama", prompt, 3)), f"billed {moved} for at least 3 tokens"
    assert moved < Gateway.dollars(cost_nano("tiny-llama", prompt, MAX_OUTPUT)), "not billed for max_tokens"


def test_a_dropped_stream_is_billed_llamas_own_prompt_count(llama_gateway: Gateway, account: Account,
                                                           direct: openai.OpenAI) -> None:
    """The prompt part of a dropped stream's bill is exactly llama.cpp's count (35 here), not Tollgate's estimate (12):
    on `tiny-llama-prompt` a prompt token costs 1,000 nanodollars, and the few output tokens 1 more in all."""
    prompt = direct.chat.completions.create(model="x", messages=HELLO, max_tokens=1).usage.prompt_tokens
    before = llama_gateway.balance(account.key)
    body = json.dumps({"model": "tiny-llama-prompt", "messages": HELLO, "max_tokens": MAX_OUTPUT, "stream": True}).encode()
    req = urllib.request.Request(llama_gateway.url + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {account.key}", "Content-Type": "application/json"})
    res = urllib.request.urlopen(req, timeout=30)
    for line in res:
        if line.startswith(b"data: {") and b'"content":"' in line:
            break
    res.close()
    after = llama_gateway.settled_balance(account.key, before)
    assert before - after == Gateway.dollars(prompt * 1000 + 1), f"billed {before - after} for a {prompt}-token prompt"


def test_prompt_progress_reaches_a_client_that_asked_for_it(llama_gateway: Gateway, account: Account, client: openai.OpenAI,
                                                           direct: openai.OpenAI) -> None:
    """llama.cpp's own `return_progress` passes through: the client gets its progress chunks (and is billed as ever)."""
    prompt = direct.chat.completions.create(model="x", messages=HELLO, max_tokens=1).usage.prompt_tokens
    before = llama_gateway.balance(account.key)
    chunks = list(client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=3, stream=True,
                                                 extra_body={"return_progress": True}))
    totals = [c.prompt_progress["total"] for c in chunks if getattr(c, "prompt_progress", None)]
    assert totals and set(totals) == {prompt}
    llama_gateway.assert_debited(account.key, before, cost_nano("tiny-llama", prompt, 3))


def test_context_overflow_is_a_clear_400_and_bills_nothing(llama_gateway: Gateway, account: Account,
                                                            client: openai.OpenAI) -> None:
    before = llama_gateway.balance(account.key)
    long = [{"role": "user", "content": "hello " * 2500}]
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as e:
            r = client.chat.completions.create(model="tiny-llama", messages=long, max_tokens=5, stream=stream)
            if stream:
                list(r)
        assert e.value.status_code == 400
        err = e.value.body
        assert err["code"] == "context_length_exceeded", err
        assert err["type"] == "invalid_request_error"
        assert "context" in err["message"] and "tokens" in err["message"], err["message"]
    llama_gateway.assert_not_debited(account.key, before)


def test_llama_500_on_bad_input_is_a_502_in_the_envelope_and_bills_nothing(llama_gateway: Gateway, account: Account,
                                                                            client: openai.OpenAI) -> None:
    """llama.cpp answers an image sent to a text-only model with a 500: the client gets the family's envelope
    (a 502 upstream_error: a host's 5xx body is logged, not shown) and nothing is billed."""
    before = llama_gateway.balance(account.key)
    msg = [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model="tiny-llama", messages=msg, max_tokens=5)
    assert e.value.status_code == 502
    err = e.value.body
    assert err["code"] == "upstream_error" and err["type"] == "server_error"
    assert err["message"] == "The model host failed (status 500). Nothing was billed."
    llama_gateway.assert_not_debited(account.key, before)


def test_invalid_grammar_is_a_400(llama_gateway: Gateway, account: Account, client: openai.OpenAI) -> None:
    """A request llama.cpp refuses (a JSON schema it cannot turn into a grammar) keeps its reason."""
    before = llama_gateway.balance(account.key)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=5, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "bogus"}}})
    assert e.value.body["code"] == "upstream_invalid_request"
    assert "schema" in e.value.body["message"].lower()
    llama_gateway.assert_not_debited(account.key, before)


def test_balance_equals_ledger(llama_gateway: Gateway, account: Account, client: openai.OpenAI) -> None:
    client.chat.completions.create(model="tiny-llama", messages=HELLO, max_tokens=3)
    time.sleep(0.3)
    show = llama_gateway.cli("account", "show", account.account_id)
    assert Decimal(str(show["balance"])) == Decimal(str(show["ledger_total"]))
