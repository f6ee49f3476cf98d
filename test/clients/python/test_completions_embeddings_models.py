"""Legacy completions, embeddings (float and base64) and the model list through the official client."""
from __future__ import annotations

import json
import math

import pytest

from gateway import cost_nano, embedded_models, published_matches_config
from openapi_spec import decode_base64_embedding

EMBED_INPUT = ["The gateway meters every token.", "Balances are integer nanodollars."]


def test_a_legacy_completion_returns_text_and_bills_exactly_price_times_usage(gateway, account, client, spec):
    before = gateway.balance(account.key)
    raw = client.completions.with_raw_response.create(model="sim-chat", prompt="Once upon a time", max_tokens=12)
    spec.assert_valid("CreateCompletionResponse", raw.http_response.json())
    completion = raw.parse()

    assert completion.object == "text_completion"
    assert completion.model == "sim-chat"
    choice = completion.choices[0]
    assert choice.text.strip()
    assert choice.finish_reason in ("stop", "length")
    usage = completion.usage
    assert usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 12
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens))


def test_a_streamed_legacy_completion_with_include_usage_ends_with_one_usage_chunk_and_bills_it(gateway, account, client):
    # The spec has no chunk schema for streamed completions (its CreateCompletionResponse makes
    # finish_reason a non-null string), so only the behaviour is checked here.
    before = gateway.balance(account.key)
    chunks = list(client.completions.create(model="sim-chat", prompt="Once upon a time", max_tokens=12,
                                            stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "text_completion" for c in chunks)
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1 and chunks[-1] is with_usage[0]
    assert chunks[-1].choices == []
    text = "".join(c.choices[0].text for c in chunks[:-1])
    assert text.strip()
    usage = chunks[-1].usage
    assert 0 < usage.completion_tokens <= 12
    gateway.assert_debited(account.key, before, cost_nano("sim-chat", usage.prompt_tokens, usage.completion_tokens))


def test_float_embeddings_return_one_384_dimension_vector_per_input_and_bill_input_tokens(gateway, account, client, spec):
    before = gateway.balance(account.key)
    raw = client.embeddings.with_raw_response.create(model="sim-embed", input=EMBED_INPUT, encoding_format="float")
    spec.assert_valid("CreateEmbeddingResponse", raw.http_response.json())
    result = raw.parse()

    assert result.object == "list"
    assert result.model == "sim-embed"
    assert [d.index for d in result.data] == [0, 1]
    for item in result.data:
        assert item.object == "embedding"
        assert len(item.embedding) == 384
        assert all(isinstance(x, float) and math.isfinite(x) for x in item.embedding)
    assert result.data[0].embedding != result.data[1].embedding
    assert result.usage.prompt_tokens > 0
    assert result.usage.total_tokens == result.usage.prompt_tokens
    gateway.assert_debited(account.key, before, cost_nano("sim-embed", result.usage.prompt_tokens))


def test_the_client_asks_for_base64_embeddings_by_default_and_decodes_them_to_the_float_vectors(gateway, account, client):
    floats = client.embeddings.create(model="sim-embed", input=EMBED_INPUT, encoding_format="float")
    before = gateway.balance(account.key)
    raw = client.embeddings.with_raw_response.create(model="sim-embed", input=EMBED_INPUT)

    # What went over the wire: the client asked for base64 and got strings back ...
    assert json.loads(raw.http_request.content)["encoding_format"] == "base64"
    wire = raw.http_response.json()
    assert all(isinstance(d["embedding"], str) for d in wire["data"])
    # ... and what the user gets: the same vectors as the float request, to float32 precision.
    decoded = raw.parse()
    for got, want in zip(decoded.data, floats.data, strict=True):
        assert len(got.embedding) == 384
        assert got.embedding == pytest.approx(want.embedding, rel=1e-6, abs=1e-7)
    gateway.assert_debited(account.key, before, cost_nano("sim-embed", decoded.usage.prompt_tokens))


def test_explicit_base64_embeddings_are_little_endian_float32_and_match_the_spec_once_decoded(client, spec):
    raw = client.embeddings.with_raw_response.create(model="sim-embed", input=EMBED_INPUT, encoding_format="base64")
    body = raw.http_response.json()
    strings = [d["embedding"] for d in body["data"]]
    assert all(isinstance(s, str) for s in strings)
    # The spec describes only the float form of Embedding.embedding (its request schema documents the
    # base64 option); so the body is validated with each string replaced by the floats it encodes.
    for item in body["data"]:
        item["embedding"] = decode_base64_embedding(item["embedding"])
        assert len(item["embedding"]) == 384
    spec.assert_valid("CreateEmbeddingResponse", body)
    parsed = raw.parse()  # the user's object keeps the strings they asked for
    assert [d.embedding for d in parsed.data] == strings


def test_the_model_list_shows_the_simulated_models_and_matches_the_spec(client, spec):
    raw = client.models.with_raw_response.list()
    body = raw.http_response.json()
    spec.assert_valid("ListModelsResponse", body)
    for model in body["data"]:
        spec.assert_valid("Model", model)

    models = list(raw.parse())
    ids = [m.id for m in models]
    assert sorted(ids) == ["sim-chat", "sim-embed", "sim-realtime", "sim-reasoner", "sim-sts", "sim-stt", "sim-tts", "sim-tts-clone"]
    for m in models:
        assert m.object == "model"
        assert m.owned_by == "tollgate-sim"
        assert m.model_extra.get("simulated") is True
        assert isinstance(m.created, int) and m.created > 0


def test_retrieving_a_model_returns_it_and_matches_the_spec(client, spec):
    raw = client.models.with_raw_response.retrieve("sim-embed")
    spec.assert_valid("Model", raw.http_response.json())
    model = raw.parse()
    assert model.id == "sim-embed"
    assert model.owned_by == "tollgate-sim"
    assert model.model_extra.get("simulated") is True


def test_listing_and_retrieving_models_costs_nothing(gateway, account, client):
    before = gateway.balance(account.key)
    client.models.list()
    client.models.retrieve("sim-chat")
    gateway.assert_not_debited(account.key, before)


def test_every_listed_model_carries_its_configured_prices_and_the_client_still_parses_the_list(client):
    configured = {m["id"]: m for m in embedded_models()}
    models = list(client.models.list())
    assert sorted(m.id for m in models) == sorted(configured)
    for m in models:
        published_matches_config(configured[m.id], m.model_extra["pricing"])
        for name in [m.id, *configured[m.id].get("aliases", [])]:
            one = client.models.retrieve(name)
            assert one.id == m.id
            published_matches_config(configured[m.id], one.model_extra["pricing"])
