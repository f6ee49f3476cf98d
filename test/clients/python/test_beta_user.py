"""The official `elevenlabs` client's `user` group against `tollgate serve`: `client.user.get()` answers the
user object with the account's subscription inside (as `/user/subscription` answers it), valid to the spec;
and adding a voice, which is free, never speaks of billing when a sample is refused."""
from __future__ import annotations

import json
import time

import pytest
from elevenlabs.core.api_error import ApiError

from test_elevenlabs import el, el_client, el_spec, wav  # noqa: F401 (fixtures)


def test_user_get_answers_the_user_object_with_the_subscription_inside(el, el_spec, gateway, account):  # noqa: F811
    raw = el.user.with_raw_response.get()
    body = json.loads(raw._response.content)
    el_spec.assert_valid("UserResponseModel", body)
    user = raw.data
    assert user.user_id == account.account_id
    assert user.is_api_key_hashed is True
    assert user.xi_api_key_preview.startswith(account.prefix)
    assert "xi_api_key" not in body, "keys are stored hashed: never echoed"
    assert 0 < user.created_at <= time.time()
    # The subscription inside is the one `/user/subscription` answers.
    sub = el.user.subscription.get()
    assert user.subscription.character_limit == sub.character_limit == 5 * 1_000_000 // 30
    assert user.subscription.status == sub.status == "active"
    assert user.subscription.voice_limit == sub.voice_limit
    assert user.subscription.can_use_instant_voice_cloning is True


def test_user_get_needs_a_key_with_the_voice_scope(gateway):
    with pytest.raises(ApiError) as err:
        el_client(gateway, gateway.account("1", scopes="llm").key).user.get()
    assert err.value.status_code == 403


def test_a_voice_sample_whose_length_cannot_be_read_is_refused_without_talk_of_billing(el):  # noqa: F811
    with pytest.raises(ApiError) as err:
        el.voices.ivc.create(name="Empty", files=[("a.wav", wav(1, samples=0), "audio/wav")])
    assert err.value.status_code == 400
    message = err.value.body["detail"]["message"]
    assert "voice sample" in message, message
    assert "bill" not in message.lower(), message
