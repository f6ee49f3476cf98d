"""The official `elevenlabs` Python client's realtime text-to-speech helper (`convert_realtime`, the
stream-input WebSocket) against `tollgate serve`: text in as it is written, audio back, billed by the
characters synthesized."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from elevenlabs.client import ElevenLabs
from elevenlabs.core.api_error import ApiError
from websockets.exceptions import InvalidStatus

from gateway import Gateway

PER_MCHAR_NANO = 15_000_000_000  # $15 per million characters
MODELS = [
    {"id": "sim-chat", "upstream": "sim", "kind": "chat", "simulated": True, "input_per_mtok": "0.30", "output_per_mtok": "2.50"},
    {"id": "sim-tts-ws", "upstream": "sim", "kind": "tts", "simulated": True, "per_mchar": "15", "aliases": ["eleven_flash_v2_5"]},
]
VOICE = "JBFqnCBsd6RMkjVDRZzb"  # George, an ElevenLabs premade voice


@pytest.fixture(scope="module")
def ws_gateway() -> Iterator[Gateway]:
    gw = Gateway(models=MODELS).start()
    try:
        yield gw
    finally:
        gw.stop()


def realtime(gw: Gateway, key: str):
    tts = ElevenLabs(api_key=key, base_url=gw.url + "/beta").text_to_speech
    # The client turns any base URL into wss:// (it replaces the scheme before its own http→ws mapping):
    # against a plain-HTTP gateway it must be told ws:// (a TLS-terminating proxy in front needs nothing).
    tts._ws_base_url = gw.url.replace("http", "ws", 1) + "/beta"
    return tts


def test_text_streamed_through_convert_realtime_comes_back_as_audio_billed_per_character(ws_gateway):
    acct = ws_gateway.account("1", scopes="voice")
    before = ws_gateway.balance(acct.key)
    parts = ["Hello there, this is a realtime ", "speech test through the gateway. ", "It comes back as audio."]
    audio = b"".join(realtime(ws_gateway, acct.key).convert_realtime(
        voice_id=VOICE, text=iter(parts), model_id="eleven_flash_v2_5", output_format="pcm_16000"))
    # The client's chunker sends the text in pieces that end with a space: every character of it is synthesized once.
    sent = "".join(parts) + " "
    assert len(audio) % 2 == 0 and len(audio) > 0
    # 16 kHz 16-bit mono: sim speaks 60 ms per character, spaces included.
    assert len(audio) / 32_000 == pytest.approx(len(sent) * 0.06, abs=0.01 * len(parts))
    ws_gateway.assert_debited(acct.key, before, len(sent) * PER_MCHAR_NANO // 1_000_000)


def test_a_key_without_the_voice_scope_is_refused_before_any_socket(ws_gateway):
    acct = ws_gateway.account("1", scopes="llm")
    with pytest.raises(InvalidStatus) as e:
        b"".join(realtime(ws_gateway, acct.key).convert_realtime(voice_id=VOICE, text=iter(["hi "]), output_format="pcm_16000"))
    # The upgrade is answered with the HTTP error itself, in the family's envelope.
    assert e.value.response.status_code == 403
    assert json.loads(e.value.response.body)["detail"]["status"] == "insufficient_scope"


def test_an_unknown_output_format_is_closed_with_1008_and_the_reason(ws_gateway):
    acct = ws_gateway.account("1", scopes="voice")
    with pytest.raises(ApiError) as e:
        b"".join(realtime(ws_gateway, acct.key).convert_realtime(voice_id=VOICE, text=iter(["hi "]), output_format="wav_99"))
    assert e.value.status_code == 1008
    assert "invalid output_format" in str(e.value.body) or "unknown" in str(e.value.body)
