"""The official `openai` Python client's realtime helper (`client.realtime.connect`, the GA protocol over
a WebSocket) against `tollgate serve`: a text turn billed exactly its usage, a session.update refused for
G.711 audio with the session kept, an ephemeral client secret minted with the client and used, and a text
turn through a realtime pass-through (an upstream that speaks the protocol itself) billed its reported usage."""
from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway import Account, Gateway


def price_nano(input_tokens: int, output_tokens: int) -> int:
    """sim-chat's price: $0.30 in, $2.50 out per million tokens, rounded up once."""
    num = input_tokens * 300_000_000 + output_tokens * 2_500_000_000
    return -(-num // 1_000_000)


def ws_client(gateway: Gateway, key: str, base: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=gateway.url + base, max_retries=0, timeout=30)


def text_turn(conn, text: str):
    conn.conversation.item.create(item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
    conn.response.create(response={"output_modalities": ["text"]})  # sessions start with audio out
    deltas: list[str] = []
    for event in conn:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "error":
            raise AssertionError(f"error event: {event.error}")
        elif event.type == "response.done":
            return "".join(deltas), event.response


@pytest.mark.parametrize("base", ["/v1", "/alpha/v1"])
def test_a_text_turn_streams_the_reply_and_bills_exactly_its_usage(gateway: Gateway, account: Account, base: str):
    before = gateway.balance(account.key)
    with ws_client(gateway, account.key, base).realtime.connect(model="sim-chat") as conn:
        created = conn.recv()
        assert created.type == "session.created"
        assert created.session.output_modalities == ["audio"], "sessions start with audio out, as OpenAI's do"
        conn.session.update(session={"type": "realtime", "output_modalities": ["text"], "instructions": "Answer briefly."})
        updated = conn.recv()
        assert updated.type == "session.updated"
        assert updated.session.instructions == "Answer briefly."
        text, response = text_turn(conn, "Say hello to the realtime gateway.")
    assert response.status == "completed"
    assert text and response.output[0].content[0].text == text
    usage = response.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    gateway.assert_debited(account.key, before, price_nano(usage.input_tokens, usage.output_tokens))


def test_session_update_with_pcmu_is_an_error_event_and_the_session_keeps_its_configuration(gateway: Gateway, account: Account):
    with ws_client(gateway, account.key, "/v1").realtime.connect(model="sim-chat") as conn:
        assert conn.recv().type == "session.created"
        conn.session.update(session={"type": "realtime", "instructions": "Kept."})
        assert conn.recv().type == "session.updated"
        conn.session.update(session={"type": "realtime", "instructions": "Not kept.",
                                     "audio": {"input": {"format": {"type": "audio/pcmu"}}}})
        err = conn.recv()
        assert err.type == "error"
        assert err.error.type == "invalid_request_error"
        assert err.error.code == "unsupported_parameter"
        assert err.error.param == "session.audio.input.format"
        conn.session.update(session={"type": "realtime"})
        kept = conn.recv()
        assert kept.type == "session.updated"
        assert kept.session.instructions == "Kept."


def test_an_ephemeral_client_secret_minted_by_the_client_opens_a_session_billed_to_its_parent(gateway: Gateway, account: Account):
    parent = ws_client(gateway, account.key, "/v1")
    secret = parent.realtime.client_secrets.create(
        expires_after={"anchor": "created_at", "seconds": 600},
        session={"type": "realtime", "model": "sim-chat", "instructions": "From the secret."})
    assert secret.value.startswith("ek_")
    before = gateway.balance(account.key)
    with ws_client(gateway, secret.value, "/v1").realtime.connect(model="sim-chat") as conn:
        created = conn.recv()
        assert created.type == "session.created"
        assert created.session.instructions == "From the secret."
        _, response = text_turn(conn, "Hello with an ephemeral key.")
    gateway.assert_debited(account.key, before, price_nano(response.usage.input_tokens, response.usage.output_tokens))
    # The secret is no API key for anything else.
    with pytest.raises(openai.AuthenticationError):
        ws_client(gateway, secret.value, "/v1").models.list()


def test_an_audio_turn_is_heard_by_server_vad_transcribed_and_answered_in_speech(gateway: Gateway, account: Account):
    """The user speaks (sim's speech of a sentence, fetched with the client's audio.speech as 24 kHz PCM),
    server VAD ends the turn after the silence, and the reply comes back as audio with its transcript.
    Billed: the speech fetched, the audio minutes in, the tokens and the characters spoken."""
    import base64

    said = "What is the capital of France?"
    client = ws_client(gateway, account.key, "/v1")
    before = gateway.balance(account.key)
    pcm = client.audio.speech.create(model="tts-1", voice="alloy", input=said, response_format="pcm").content
    assert len(pcm) == len(said) * 60 * 48  # sim: 60 ms a character, 24 kHz 16-bit
    with client.realtime.connect(model="sim-chat") as conn:
        assert conn.recv().type == "session.created"
        conn.session.update(session={"type": "realtime", "output_modalities": ["audio"],
                                     "audio": {"input": {"transcription": {"model": "whisper-1"}}, "output": {"voice": "marin"}}})
        assert conn.recv().type == "session.updated"
        silence = bytes(48_000)  # a second
        for chunk in range(0, len(pcm), 9600):
            conn.input_audio_buffer.append(audio=base64.b64encode(pcm[chunk:chunk + 9600]).decode())
        for chunk in range(0, len(silence), 9600):
            conn.input_audio_buffer.append(audio=base64.b64encode(silence[chunk:chunk + 9600]).decode())
        seen: list[str] = []
        transcript_in = None
        heard_seconds = 0.0
        transcript_out: list[str] = []
        audio = bytearray()
        for event in conn:
            seen.append(event.type)
            if event.type == "error":
                raise AssertionError(f"error event: {event.error}")
            if event.type == "conversation.item.input_audio_transcription.completed":
                transcript_in = event.transcript
                heard_seconds = event.usage.seconds
            elif event.type == "response.output_audio_transcript.delta":
                transcript_out.append(event.delta)
            elif event.type == "response.output_audio.delta":
                audio += base64.b64decode(event.delta)
            elif event.type == "response.done":
                response = event.response
                break
    assert seen.index("input_audio_buffer.speech_started") < seen.index("input_audio_buffer.speech_stopped") < seen.index("input_audio_buffer.committed")
    assert transcript_in == said
    assert response.status == "completed"
    text = "".join(transcript_out)
    assert text and response.output[0].content[0].transcript == text
    assert len(audio) == len(text) * 60 * 48
    usage = response.usage
    spent = (len(said) * 15_000 + round(heard_seconds * 1000) * 100
             + price_nano(usage.input_tokens, usage.output_tokens) + len(text) * 15_000)
    gateway.assert_debited(account.key, before, spent)


def heard_at(text: str, ms: int) -> str:
    """What was heard of `text` spoken at sim's 60 ms a character, cut at `ms`: whole words only."""
    n = min(len(text), ms // 60)
    if n < len(text) and not text[n].isspace():
        while n > 0 and not text[n - 1].isspace():
            n -= 1
    return text[:n].rstrip()


def test_an_input_audio_item_is_transcribed_and_answered_and_a_spoken_reply_truncates_to_what_was_heard(gateway: Gateway, account: Account):
    """conversation.item.create with an input_audio part (sim's speech fetched as 24 kHz PCM): transcribed,
    billed by its duration, answered in speech; conversation.item.truncate then cuts the reply's transcript
    to the words heard by audio_end_ms. Billed: the speech fetched, the audio in, the tokens, the characters."""
    import base64

    said = "Which platform does the train leave from?"
    client = ws_client(gateway, account.key, "/v1")
    before = gateway.balance(account.key)
    pcm = client.audio.speech.create(model="tts-1", voice="alloy", input=said, response_format="pcm").content
    with client.realtime.connect(model="sim-chat") as conn:
        assert conn.recv().type == "session.created"
        conn.session.update(session={"type": "realtime", "output_modalities": ["audio"]})
        assert conn.recv().type == "session.updated"
        conn.conversation.item.create(item={"type": "message", "role": "user",
                                            "content": [{"type": "input_audio", "audio": base64.b64encode(pcm).decode()}]})
        conn.response.create(response={"max_output_tokens": 30})
        transcript_in = None
        heard_seconds = 0.0
        audio = bytearray()
        for event in conn:
            if event.type == "error":
                raise AssertionError(f"error event: {event.error}")
            if event.type == "conversation.item.created":
                assert event.item.content[0].type == "input_audio" and event.item.content[0].transcript is None
            elif event.type == "conversation.item.input_audio_transcription.completed":
                transcript_in = event.transcript
                heard_seconds = event.usage.seconds
            elif event.type == "response.output_audio.delta":
                audio += base64.b64decode(event.delta)
            elif event.type == "response.done":
                response = event.response
                break
        assert transcript_in == said
        assert response.status == "completed"
        item = response.output[0]
        text = item.content[0].transcript
        assert len(audio) == len(text) * 60 * 48
        cut = len(audio) // 48 // 2 + 30
        conn.conversation.item.truncate(item_id=item.id, content_index=0, audio_end_ms=cut)
        truncated = conn.recv()
        assert truncated.type == "conversation.item.truncated", truncated
        assert (truncated.item_id, truncated.content_index, truncated.audio_end_ms) == (item.id, 0, cut)
        conn.conversation.item.retrieve(item_id=item.id)
        retrieved = conn.recv()
        assert retrieved.type == "conversation.item.retrieved"
        assert retrieved.item.content[0].transcript == heard_at(text, cut)
    usage = response.usage
    spent = (len(said) * 15_000 + round(heard_seconds * 1000) * 100
             + price_nano(usage.input_tokens, usage.output_tokens) + len(text) * 15_000)
    gateway.assert_debited(account.key, before, spent)


# A realtime model passed through to an upstream that speaks the realtime protocol itself (sim's /v1/realtime),
# priced per token: $4 text in, $16 text out, $32 / $64 audio in / out per million.
PASSTHROUGH = {"id": "sim-rt-pass", "upstream": "rt", "upstream_model": "sim-chat", "kind": "realtime",
               "input_per_mtok": "4", "output_per_mtok": "16", "audio_input_per_mtok": "32",
               "audio_output_per_mtok": "64", "max_output_tokens": 4096}


@pytest.fixture(scope="module")
def passthrough() -> Iterator[Gateway]:
    models = [{"id": "sim-chat", "upstream": "sim", "kind": "chat", "input_per_mtok": "0.30", "output_per_mtok": "2.50"},
              PASSTHROUGH]
    gw = Gateway(models, upstreams={"sim": {"sim": {}}, "rt": {"sim": {}, "realtime_api": True}}).start()
    try:
        yield gw
    finally:
        gw.stop()


def test_a_text_turn_through_the_realtime_pass_through_is_billed_the_upstreams_reported_usage(passthrough: Gateway):
    account = passthrough.account("5")
    before = passthrough.balance(account.key)
    with ws_client(passthrough, account.key, "/v1").realtime.connect(model="sim-rt-pass") as conn:
        created = conn.recv()
        assert created.type == "session.created"
        assert created.session.model == "sim-rt-pass"  # the upstream's own name (sim-chat) is not shown
        conn.session.update(session={"type": "realtime", "output_modalities": ["text"], "instructions": "Answer briefly."})
        updated = conn.recv()
        assert updated.type == "session.updated"
        assert updated.session.instructions == "Answer briefly."
        text, response = text_turn(conn, "Say hello through the pass-through.")
    assert response.status == "completed"
    assert text and response.output[0].content[0].text == text
    usage = response.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    num = usage.input_tokens * 4_000_000_000 + usage.output_tokens * 16_000_000_000
    passthrough.assert_debited(account.key, before, -(-num // 1_000_000))


def test_a_spoken_reply_starts_before_its_text_is_complete(gateway: Gateway, account: Account):
    """The reply is spoken sentence by sentence as it streams (sim streams a token every 40 ms): the first
    output_audio delta arrives before the last transcript delta; audio for every character, billed once."""
    import base64

    client = ws_client(gateway, account.key, "/v1")
    before = gateway.balance(account.key)
    with client.realtime.connect(model="sim-chat", extra_headers={"x-sim-token-delay-ms": "40"}) as conn:
        created = conn.recv()
        assert created.session.output_modalities == ["audio"]
        conn.conversation.item.create(item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell me a long story about gateways."}]})
        conn.response.create(response={"max_output_tokens": 120})
        seen: list[str] = []
        audio = bytearray()
        for event in conn:
            seen.append(event.type)
            if event.type == "error":
                raise AssertionError(f"error event: {event.error}")
            if event.type == "response.output_audio.delta":
                audio += base64.b64decode(event.delta)
            elif event.type == "response.done":
                response = event.response
                break
    assert response.status == "completed"
    last_text = len(seen) - 1 - seen[::-1].index("response.output_audio_transcript.delta")
    assert seen.index("response.output_audio.delta") < last_text
    text = response.output[0].content[0].transcript
    assert len(audio) == len(text) * 60 * 48
    usage = response.usage
    gateway.assert_debited(account.key, before, price_nano(usage.input_tokens, usage.output_tokens) + len(text) * 15_000)


def refused_status(gateway: Gateway, key: str) -> tuple[int, str]:
    """Opens client.realtime.connect with `key`: the upgrade's refusal as (status, body), which the client raises."""
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus) as refused:
        with ws_client(gateway, key, "/v1").realtime.connect(model="sim-chat") as conn:
            conn.recv()
    response = refused.value.response
    return response.status_code, response.body.decode("utf-8", "replace")


def test_an_expired_client_secret_and_one_whose_parent_key_was_revoked_open_no_session(gateway: Gateway):
    """A secret minted for 10 s (the shortest the family allows) opens nothing once expired; a 10-minute one
    works until its parent key is revoked, then opens nothing either: 401 at the upgrade, nothing billed."""
    import time

    account = gateway.account("5")
    parent = ws_client(gateway, account.key, "/v1")
    short = parent.realtime.client_secrets.create(expires_after={"anchor": "created_at", "seconds": 10},
                                                 session={"type": "realtime", "model": "sim-chat"})
    long = parent.realtime.client_secrets.create(session={"type": "realtime", "model": "sim-chat"})
    assert short.expires_at - time.time() <= 11
    with ws_client(gateway, long.value, "/v1").realtime.connect(model="sim-chat") as conn:
        assert conn.recv().type == "session.created"
    before = gateway.balance(account.key)
    time.sleep(max(0.0, short.expires_at - time.time()) + 1)
    status, body = refused_status(gateway, short.value)
    assert status == 401 and "expired" in body, body
    gateway.cli("key", "revoke", account.key)
    deadline = time.time() + 10  # the revocation reaches every cache through the change feed
    while True:
        try:
            status, body = refused_status(gateway, long.value)
            break
        except BaseException:  # noqa: BLE001 - still open: the revocation has not arrived yet
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    assert status == 401 and "revoked" in body, body
    # Nothing was billed for either refusal (read with a second key: the first one is revoked).
    other = gateway.cli("key", "create", "--account", account.account_id)["key"]
    assert gateway.balance(other) == before


def test_the_quickstart_model_gpt_realtime_answers_an_audio_item_in_speech_billed_at_the_realtime_prices(gateway: Gateway, account: Account):
    """OpenAI's quickstart `client.realtime.connect(model="gpt-realtime")` on the embedded default: the alias of
    sim-realtime, priced in the realtime units: audio in at $0.06 a minute, tokens at $4 / $16 per million, the
    characters it speaks at $15 per million (sim's speech for the user's audio is fetched at tts-1's $15 too)."""
    import base64

    said = "Where is the nearest station?"
    client = ws_client(gateway, account.key, "/v1")
    before = gateway.balance(account.key)
    pcm = client.audio.speech.create(model="tts-1", voice="alloy", input=said, response_format="pcm").content
    with client.realtime.connect(model="gpt-realtime") as conn:
        created = conn.recv()
        assert created.type == "session.created"
        assert created.session.model == "sim-realtime"
        conn.conversation.item.create(item={"type": "message", "role": "user",
                                            "content": [{"type": "input_audio", "audio": base64.b64encode(pcm).decode()}]})
        conn.response.create(response={"max_output_tokens": 30})
        heard_seconds = 0.0
        audio = bytearray()
        for event in conn:
            if event.type == "error":
                raise AssertionError(f"error event: {event.error}")
            if event.type == "conversation.item.input_audio_transcription.completed":
                assert event.transcript == said
                heard_seconds = event.usage.seconds
            elif event.type == "response.output_audio.delta":
                audio += base64.b64decode(event.delta)
            elif event.type == "response.done":
                response = event.response
                break
    assert response.status == "completed"
    text = response.output[0].content[0].transcript
    assert text and len(audio) == len(text) * 60 * 48
    usage = response.usage
    tokens = -(-(usage.input_tokens * 4_000_000_000 + usage.output_tokens * 16_000_000_000) // 1_000_000)
    spent = len(said) * 15_000 + round(heard_seconds * 1000) * 1_000 + tokens + len(text) * 15_000
    gateway.assert_debited(account.key, before, spent)

