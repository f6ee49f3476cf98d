"""The official `elevenlabs` Python client against a gateway whose speech models live on ElevenLabs' own API
(`protocol: elevenlabs`), here the stand-in test/helpers/elevenlabs-standin.mjs: text to speech, with
timestamps, and the stream-input socket relayed socket to socket, billed by Tollgate's own character count; an ElevenLabs
404 reaching the client as a 404 naming the voice. (The client has no multi-context helper, only its message types.)"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest
from elevenlabs.client import ElevenLabs
from elevenlabs.core.api_error import ApiError

from gateway import NODE, REPO, Gateway

UPSTREAM_KEY = "sk_upstream_operator_key_python"
PER_MCHAR_NANO = 75_000_000_000  # $75 per million characters
VOICE = "JBFqnCBsd6RMkjVDRZzb"  # George: the same premade id at Tollgate and at ElevenLabs
MODELS = [
    {"id": "sim-chat", "upstream": "sim", "kind": "chat", "simulated": True, "input_per_mtok": "0.30", "output_per_mtok": "2.50"},
    {"id": "eleven_flash_v2_5", "upstream": "eleven", "kind": "tts", "per_mchar": "75"},
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[dict]:
    proc = subprocess.Popen([NODE, str(REPO / "test" / "helpers" / "elevenlabs-standin.mjs"), UPSTREAM_KEY],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout
        url = json.loads(proc.stdout.readline())["url"]
        os.environ["TEST_ELEVENLABS_KEY"] = UPSTREAM_KEY
        gw = Gateway(models=MODELS, upstreams={
            "sim": {"sim": {}},
            "eleven": {"base_url": url, "protocol": "elevenlabs", "api_key_env": "TEST_ELEVENLABS_KEY"},
        }).start()
        try:
            yield {"gw": gw, "url": url}
        finally:
            gw.stop()
    finally:
        os.environ.pop("TEST_ELEVENLABS_KEY", None)
        proc.kill()
        proc.wait()


def seen(url: str) -> list[dict]:
    with urllib.request.urlopen(url + "/_standin/requests") as r:
        return json.loads(r.read())


def test_text_to_speech_and_timestamps_come_from_elevenlabs_billed_per_character(upstream):
    gw: Gateway = upstream["gw"]
    acct = gw.account("1", scopes="voice")
    tts = ElevenLabs(api_key=acct.key, base_url=gw.url + "/beta").text_to_speech
    text = "Hello from Python."
    before = gw.balance(acct.key)
    audio = b"".join(tts.convert(VOICE, text=text, model_id="eleven_flash_v2_5", output_format="pcm_16000"))
    assert len(audio) == round(len(text) * 0.06 * 16000) * 2  # the stand-in speaks 60 ms a character
    gw.assert_debited(acct.key, before, len(text) * PER_MCHAR_NANO // 1_000_000)

    before = gw.balance(acct.key)
    ts = tts.convert_with_timestamps(VOICE, text=text, model_id="eleven_flash_v2_5", output_format="pcm_24000")
    assert len(base64.b64decode(ts.audio_base_64)) == round(len(text) * 0.06 * 24000) * 2
    assert ts.alignment.characters == list(text)
    gw.assert_debited(acct.key, before, len(text) * PER_MCHAR_NANO // 1_000_000)

    calls = [r for r in seen(upstream["url"]) if r["path"].startswith("/v1/text-to-speech/")]
    assert all(r["headers"]["xi-api-key"] == UPSTREAM_KEY for r in calls)
    assert all(acct.key not in json.dumps(r) for r in calls)


def test_convert_realtime_is_relayed_socket_to_socket_and_billed_per_character_spoken(upstream):
    gw: Gateway = upstream["gw"]
    acct = gw.account("1", scopes="voice")
    tts = ElevenLabs(api_key=acct.key, base_url=gw.url + "/beta").text_to_speech
    # The client turns any base URL into wss://: against a plain-HTTP gateway it must be told ws://.
    tts._ws_base_url = gw.url.replace("http", "ws", 1) + "/beta"
    parts = ["Hello there, this goes ", "through to ElevenLabs ", "and back."]
    before = gw.balance(acct.key)
    audio = b"".join(tts.convert_realtime(voice_id=VOICE, text=iter(parts), model_id="eleven_flash_v2_5", output_format="pcm_16000"))
    socket = [r for r in seen(upstream["url"]) if r["method"] == "WS"][-1]
    assert socket["headers"]["xi-api-key"] == UPSTREAM_KEY
    assert socket["query"]["model_id"] == "eleven_flash_v2_5"
    assert acct.key not in json.dumps(socket)
    # What the client's chunker sent besides the opening space; every piece was spoken (the stand-in speaks each on arrival).
    spoken = "".join(f["text"] for f in socket["frames"][1:] if f.get("text", "").strip())
    assert spoken.replace(" ", "") == "".join(parts).replace(" ", "")
    assert len(audio) == sum(round(len(f["text"]) * 0.06 * 16000) * 2 for f in socket["frames"][1:] if f.get("text", "").strip())
    gw.assert_debited(acct.key, before, len(spoken) * PER_MCHAR_NANO // 1_000_000)


def test_a_voice_elevenlabs_does_not_have_is_a_404_naming_it_and_bills_nothing(upstream):
    gw: Gateway = upstream["gw"]
    acct = gw.account("1", scopes="voice")
    tts = ElevenLabs(api_key=acct.key, base_url=gw.url + "/beta").text_to_speech
    adam = "pNInz6obpgDQGcFmaJgB"  # premade at Tollgate, unknown to the stand-in
    before = gw.balance(acct.key)
    with pytest.raises(ApiError) as e:
        b"".join(tts.convert(adam, text="hello", model_id="eleven_flash_v2_5"))
    assert e.value.status_code == 404
    assert e.value.body["detail"]["status"] == "voice_not_found"
    assert f"voice_id '{adam}' was not found" in e.value.body["detail"]["message"]
    assert gw.balance(acct.key) == before
