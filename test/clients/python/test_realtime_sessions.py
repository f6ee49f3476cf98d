"""The beta-era realtime session route (`client.beta.realtime.sessions.create`, `POST /v1/realtime/sessions`)
answers in the beta's flat shape, and an ephemeral client secret presented to a REST route is told what it is."""
from __future__ import annotations

import time

import openai
import pytest

from gateway import Account, Gateway


def test_the_beta_sessions_route_answers_the_beta_shape_and_its_secret_opens_that_session(gateway: Gateway, account: Account):
    client = gateway.client(account.key)
    now = int(time.time())
    raw = client.beta.realtime.sessions.with_raw_response.create(
        model="sim-chat", modalities=["text"], instructions="Beta era.", voice="verse", input_audio_format="pcm16",
        output_audio_format="pcm16", max_response_output_tokens=64, temperature=0.7,
        client_secret={"expires_after": {"anchor": "created_at", "seconds": 120}})
    body = raw.http_response.json()
    session = raw.parse()
    # The beta's fields, not the GA's (`output_modalities`, `audio.input.format`, `max_output_tokens`).
    assert session.modalities == ["text"]
    assert session.voice == "verse"
    assert session.input_audio_format == "pcm16" and session.output_audio_format == "pcm16"
    assert session.max_response_output_tokens == 64
    assert session.temperature == 0.7
    assert session.instructions == "Beta era."
    assert session.turn_detection is not None and session.turn_detection.type == "server_vad"
    for ga in ("output_modalities", "audio", "max_output_tokens", "type"):
        assert ga not in body, f"{ga} is a GA field: {body}"
    assert body["object"] == "realtime.session" and body["id"].startswith("sess_")
    assert session.client_secret.value.startswith("ek_")
    assert now + 115 <= session.client_secret.expires_at <= now + 125, "the two minutes asked for, not the beta's one"
    assert body["expires_at"] == session.client_secret.expires_at
    # The secret opens the session it describes.
    with openai.OpenAI(api_key=session.client_secret.value, base_url=gateway.url + "/v1", max_retries=0).realtime.connect(model="sim-chat") as conn:
        created = conn.recv()
        assert created.type == "session.created"
        assert created.session.instructions == "Beta era."
        assert created.session.output_modalities == ["text"]


def test_a_beta_session_field_the_gateway_cannot_honour_is_refused_by_its_beta_name(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.beta.realtime.sessions.create(model="sim-chat", input_audio_noise_reduction={"type": "near_field"})
    assert err.value.body["param"] == "session.input_audio_noise_reduction"
    with pytest.raises(openai.BadRequestError) as err:
        client.beta.realtime.sessions.create(model="sim-chat", input_audio_format="g711_ulaw")
    assert err.value.body["param"] == "session.input_audio_format"


def test_a_realtime_client_secret_on_a_rest_route_is_told_it_is_a_realtime_only_secret(gateway: Gateway, account: Account):
    secret = gateway.client(account.key).realtime.client_secrets.create(session={"type": "realtime", "model": "sim-chat"}).value
    with pytest.raises(openai.AuthenticationError) as err:
        gateway.client(secret).chat.completions.create(model="sim-chat", messages=[{"role": "user", "content": "hi"}])
    message = err.value.body["message"]
    assert "realtime" in message and "client secret" in message
    assert "not a Tollgate key" not in message
