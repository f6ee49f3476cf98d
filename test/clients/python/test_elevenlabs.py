"""The official `elevenlabs` Python client against `tollgate serve` on its embedded default, base URL
`<gateway>/beta`: voices (clone, list, read, sample audio, delete), models, subscription, errors.
Every JSON reply is validated against the ElevenLabs OpenAPI description."""
from __future__ import annotations

import json
import struct

import pytest
from elevenlabs import ElevenLabs, VoiceSettings
from elevenlabs.core.api_error import ApiError
from elevenlabs.errors import UnprocessableEntityError

from conftest import SPECS
from elevenlabs_spec import ElevenLabsSpec

SPEC_PATH = SPECS / "elevenlabs-openapi.json"


@pytest.fixture(scope="session")
def el_spec() -> ElevenLabsSpec:
    return ElevenLabsSpec(SPEC_PATH)


def el_client(gateway, key: str) -> ElevenLabs:
    return ElevenLabs(api_key=key, base_url=gateway.url + "/beta", timeout=30)


@pytest.fixture
def el(gateway, account) -> ElevenLabs:
    return el_client(gateway, account.key)


def wav(seed: int, samples: int = 1600) -> bytes:
    """A small 16 kHz mono 16-bit WAV file, different for each seed."""
    data = b"".join(struct.pack("<h", (i * (seed + 7) * 37) % 16000 - 8000) for i in range(samples))
    header = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
    return header + b"data" + struct.pack("<I", len(data)) + data


def clone(el: ElevenLabs, name: str = "Narrator", **kw) -> str:
    files = kw.pop("files", [("a.wav", wav(1), "audio/wav"), ("b.wav", wav(2), "audio/wav")])
    return el.voices.ivc.create(name=name, files=files, **kw).voice_id


def test_a_voice_is_cloned_read_listed_and_deleted_through_the_client(el, el_spec):
    raw = el.voices.ivc.with_raw_response.create(
        name="Narrator", description="calm", labels={"accent": "british"},
        files=[("a.wav", wav(1), "audio/wav"), ("b.wav", wav(2, 3200), "audio/wav")])
    el_spec.assert_valid("AddVoiceIVCResponseModel", json.loads(raw._response.content))
    voice_id = raw.data.voice_id
    assert raw.data.requires_verification is False

    raw_voice = el.voices.with_raw_response.get(voice_id)
    el_spec.assert_valid("VoiceResponseModel", json.loads(raw_voice._response.content))
    voice = raw_voice.data
    assert voice.name == "Narrator" and voice.category == "cloned" and voice.description == "calm"
    assert voice.labels == {"accent": "british"}
    assert [s.file_name for s in voice.samples] == ["a.wav", "b.wav"]
    assert [s.size_bytes for s in voice.samples] == [len(wav(1)), len(wav(2, 3200))]

    audio = b"".join(el.voices.samples.audio.get(voice_id, voice.samples[1].sample_id))
    assert audio == wav(2, 3200)

    listed = el.voices.with_raw_response.get_all()
    el_spec.assert_valid("GetVoicesResponseModel", json.loads(listed._response.content))
    assert voice_id in [v.voice_id for v in listed.data.voices]
    searched = el.voices.with_raw_response.search(search="narr", page_size=5)
    el_spec.assert_valid("GetVoicesV2ResponseModel", json.loads(searched._response.content))
    assert [v.voice_id for v in searched.data.voices] == [voice_id]

    deleted = el.samples.with_raw_response.delete(voice_id, voice.samples[0].sample_id)
    el_spec.assert_valid("DeleteSampleResponseModel", json.loads(deleted._response.content))
    assert [s.sample_id for s in el.voices.get(voice_id).samples] == [voice.samples[1].sample_id]

    gone = el.voices.with_raw_response.delete(voice_id)
    el_spec.assert_valid("DeleteVoiceResponseModel", json.loads(gone._response.content))
    with pytest.raises(ApiError) as err:
        el.voices.get(voice_id)
    assert err.value.status_code == 404
    assert err.value.body["detail"]["status"] == "voice_not_found"
    assert err.value.body["error"]["code"] == "voice_not_found"


def test_v2_voices_pages_through_the_accounts_voices(el):
    ids = [clone(el, f"Pager {i}", files=[("s.wav", wav(10 + i), "audio/wav")]) for i in range(3)]
    first = el.voices.search(page_size=2, search="pager")
    assert first.has_more is True and first.total_count == 3 and len(first.voices) == 2
    second = el.voices.search(page_size=2, search="pager", next_page_token=first.next_page_token)
    assert second.has_more is False and len(second.voices) == 1
    assert [v.voice_id for v in first.voices + second.voices] == ids[::-1], "newest first"


def test_another_account_gets_404_on_a_voice_and_its_sample_for_every_verb(gateway, el):
    voice_id = clone(el)
    sample_id = el.voices.get(voice_id).samples[0].sample_id
    other = el_client(gateway, gateway.account("1").key)
    calls = [
        lambda: other.voices.get(voice_id),
        lambda: other.voices.delete(voice_id),
        lambda: other.samples.delete(voice_id, sample_id),
        lambda: b"".join(other.voices.samples.audio.get(voice_id, sample_id)),
    ]
    for call in calls:
        with pytest.raises(ApiError) as err:
            call()
        assert err.value.status_code == 404
        assert err.value.body["detail"]["status"] == "voice_not_found"
    assert voice_id not in [v.voice_id for v in other.voices.get_all().voices]
    assert voice_id not in [v.voice_id for v in other.voices.search().voices]
    assert len(el.voices.get(voice_id).samples) == 2, "the owner's voice is untouched"


def test_labels_that_are_not_json_are_a_422_validation_error(gateway, account):
    import urllib.request
    boundary = "tgtest"
    parts = [("name", None, b"X"), ("labels", None, b"{not json"), ("files", "a.wav", wav(1))]
    body = b"".join(
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"{n}\"".encode()
        + (f"; filename=\"{f}\"\r\nContent-Type: audio/wav".encode() if f else b"") + b"\r\n\r\n" + v + b"\r\n"
        for n, f, v in parts) + f"--{boundary}--\r\n".encode()
    req = urllib.request.Request(gateway.url + "/beta/v1/voices/add", data=body, method="POST", headers={
        "xi-api-key": account.key, "content-type": f"multipart/form-data; boundary={boundary}"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 422
    reply = json.loads(err.value.read())
    assert reply["error"]["code"] == "invalid_labels"
    assert reply["detail"][0]["loc"] == ["body", "labels"]


def test_models_and_subscription_match_the_spec(el, el_spec, gateway, account):
    raw = el.models.with_raw_response.list()
    body = json.loads(raw._response.content)
    el_spec.assert_valid_array("ModelResponseModel", body)
    assert "sim-tts-clone" in [m.model_id for m in raw.data]

    sub_raw = el.user.subscription.with_raw_response.get()
    sub = json.loads(sub_raw._response.content)
    el_spec.assert_valid("ExtendedSubscriptionResponseModel", sub)
    assert sub_raw.data.status == "active"
    assert sub_raw.data.character_count == 0
    # The limit is what the balance buys at the dearest TTS model: $5 at sim-tts-clone's $30 per 1M characters.
    assert gateway.balance(account.key) == 5
    assert sub_raw.data.character_limit == 5 * 1_000_000 // 30
    assert sub_raw.data.voice_slots_used == 0


def test_errors_carry_both_envelopes(gateway):
    bad = el_client(gateway, "svc_live_" + "x" * 40)
    with pytest.raises(ApiError) as err:
        bad.voices.get_all()
    assert err.value.status_code == 401
    assert err.value.body["detail"]["status"] == "invalid_api_key"
    assert set(err.value.body["error"]) == {"code", "message", "type", "param"}
    no_scope = el_client(gateway, gateway.account("1", scopes="llm").key)
    with pytest.raises(ApiError) as err:
        no_scope.models.list()
    assert err.value.status_code == 403
    assert err.value.body["detail"]["status"] == "insufficient_scope"


GEORGE = "JBFqnCBsd6RMkjVDRZzb"  # a premade voice (docs/elevenlabs.md, premade voices)
TTS_ND_PER_CHAR = 15_000  # sim-tts: $15 per 1M characters
CLONE_ND_PER_CHAR = 30_000  # sim-tts-clone: $30 per 1M characters
STS_ND_PER_MIN = 180_000_000  # sim-sts: $0.18 per minute of input


def pcm_seconds(seconds: float, rate: int = 16000) -> bytes:
    n = round(seconds * rate)
    data = b"".join(struct.pack("<h", (i * 97) % 12000 - 6000) for i in range(n))
    header = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    return header + b"data" + struct.pack("<I", len(data)) + data


@pytest.mark.parametrize("fmt,rate,width", [("pcm_24000", 24000, 2), ("pcm_16000", 16000, 2), ("pcm_44100", 44100, 2), ("ulaw_8000", 8000, 1)])
def test_text_to_speech_convert_and_stream_in_each_made_format_billed_by_characters(el, gateway, account, fmt, rate, width):
    text = "Hello through the official client."
    for call in (el.text_to_speech.convert, el.text_to_speech.stream):
        before = gateway.balance(account.key)
        audio = b"".join(call(GEORGE, text=text, model_id="eleven_multilingual_v2", output_format=fmt))
        assert len(audio) == round(len(text) * 0.06 * rate) * width  # sim speaks 60 ms a character
        gateway.assert_debited(account.key, before, len(text) * TTS_ND_PER_CHAR)


@pytest.mark.parametrize("kbps", [32, 128])
def test_text_to_speech_in_opus_is_ogg_opus_of_the_speech_length_billed_by_characters(el, gateway, account, kbps):
    text = "Hello in Opus."
    before = gateway.balance(account.key)
    audio = b"".join(el.text_to_speech.convert(GEORGE, text=text, model_id="eleven_multilingual_v2", output_format=f"opus_48000_{kbps}"))
    assert audio[:4] == b"OggS" and audio[28:36] == b"OpusHead"
    # the last Ogg page's granule position counts 48 kHz samples, the pre-skip (OpusHead bytes 10-11) included
    last = audio.rindex(b"OggS")
    assert audio[last + 5] & 4, "the stream ends with an end-of-stream page"
    granule = struct.unpack_from("<Q", audio, last + 6)[0]
    pre_skip = struct.unpack_from("<H", audio, 28 + 10)[0]
    assert (granule - pre_skip) / 48000 == pytest.approx(len(text) * 0.06, abs=0.001)
    # at the format's bit rate: the bytes grow with it (sim's tones are not silence)
    assert len(audio) > len(text) * 0.06 * kbps * 1000 / 8 * 0.6
    gateway.assert_debited(account.key, before, len(text) * TTS_ND_PER_CHAR)


def test_text_to_speech_with_timestamps_matches_the_spec_and_the_audio(el, el_spec, gateway, account):
    text = "Tick tock."
    before = gateway.balance(account.key)
    raw = el.text_to_speech.with_raw_response.convert_with_timestamps(GEORGE, text=text, output_format="pcm_16000")
    body = json.loads(raw._response.content)
    el_spec.assert_valid("AudioWithTimestampsResponseModel", body)
    assert raw.headers["character-cost"] == str(len(text))
    result = raw.data
    assert len(__import__("base64").b64decode(result.audio_base_64)) == round(len(text) * 0.06 * 16000) * 2
    assert result.alignment.characters == list(text)
    assert result.alignment.character_end_times_seconds[-1] == pytest.approx(len(text) * 0.06)
    gateway.assert_debited(account.key, before, len(text) * TTS_ND_PER_CHAR)

    before = gateway.balance(account.key)
    chunks = list(el.text_to_speech.stream_with_timestamps(GEORGE, text=text, output_format="pcm_24000"))
    audio = b"".join(__import__("base64").b64decode(c.audio_base_64) for c in chunks)
    assert len(audio) == round(len(text) * 0.06 * 24000) * 2
    assert chunks[-1].alignment.characters == list(text)
    gateway.assert_debited(account.key, before, len(text) * TTS_ND_PER_CHAR)


def test_a_cloned_voice_speaks_at_the_clone_models_price(el, gateway, account):
    voice_id = clone(el, "Mine")
    before = gateway.balance(account.key)
    audio = b"".join(el.text_to_speech.convert(voice_id, text="Mine.", output_format="pcm_24000"))
    assert len(audio) == round(5 * 0.06 * 24000) * 2
    gateway.assert_debited(account.key, before, 5 * CLONE_ND_PER_CHAR)


def test_an_output_format_outside_the_enumeration_is_a_422(el, gateway, account):
    before = gateway.balance(account.key)
    with pytest.raises(ApiError) as err:
        b"".join(el.text_to_speech.convert(GEORGE, text="Hi", output_format="wav_11025"))
    assert err.value.status_code == 422
    assert err.value.body["detail"][0]["loc"] == ["query", "output_format"]
    gateway.assert_not_debited(account.key, before)


def test_speech_to_speech_converts_billed_by_input_seconds(el, gateway, account):
    for call in (el.speech_to_speech.convert, el.speech_to_speech.stream):
        before = gateway.balance(account.key)
        audio = b"".join(call(GEORGE, audio=("in.wav", pcm_seconds(1.25), "audio/wav"), model_id="eleven_english_sts_v2", output_format="pcm_24000"))
        assert len(audio) == int(1.25 * 24000 * 2)
        gateway.assert_debited(account.key, before, -(-1250 * STS_ND_PER_MIN // 60_000))


def test_the_default_format_is_mp3(el, gateway, account):
    text = "Default format."
    before = gateway.balance(account.key)
    audio = b"".join(el.text_to_speech.convert(GEORGE, text=text))
    assert audio[:3] == b"ID3" or audio[0] == 0xFF  # an MP3 stream (ID3 tag, then frames)
    gateway.assert_debited(account.key, before, len(text) * TTS_ND_PER_CHAR)


def test_speech_to_text_gives_back_the_spoken_text_billed_by_measured_minutes(el, el_spec, gateway, account):
    text = "Round trip works."
    pcm = b"".join(el.text_to_speech.convert(GEORGE, text=text, output_format="pcm_24000"))
    wav_file = b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 24000, 48000, 2, 16) \
        + b"data" + struct.pack("<I", len(pcm)) + pcm
    before = gateway.balance(account.key)
    raw = el.speech_to_text.with_raw_response.convert(model_id="scribe_v1", file=("speech.wav", wav_file, "audio/wav"))
    el_spec.assert_valid("SpeechToTextChunkResponseModel", json.loads(raw._response.content))
    result = raw.data
    assert result.text == text
    assert [w.text for w in result.words if w.type == "word"] == ["Round", "trip", "works"]
    ms = -(-len(pcm) * 1000 // 48000)
    gateway.assert_debited(account.key, before, -(-ms * 6_000_000 // 60_000))  # sim-stt: $0.006 a minute
    with pytest.raises(ApiError) as err:
        el.speech_to_text.convert(model_id="scribe_v1", file=("speech.wav", wav_file, "audio/wav"), diarize=True)
    assert err.value.status_code == 422


def test_speech_parameters_the_model_takes_are_honoured_and_others_refused_with_a_422(el, el_spec, gateway, account):
    # sim-tts takes seed, language_code, previous_text and next_text (its speech_params): the same seed speaks the same audio.
    text = "Seeded speech."
    before = gateway.balance(account.key)
    kw = dict(text=text, model_id="eleven_flash_v2_5", output_format="pcm_24000", seed=4242, language_code="en",
              previous_text="Before it.", next_text="After it.", optimize_streaming_latency=2, enable_logging=False)
    first = b"".join(el.text_to_speech.convert(GEORGE, **kw))
    second = b"".join(el.text_to_speech.stream(GEORGE, **kw))
    assert first == second and len(first) == round(len(text) * 0.06 * 24000) * 2
    gateway.assert_debited(account.key, before, 2 * len(text) * TTS_ND_PER_CHAR)
    # No model here normalizes text: asking for it is refused, not dropped, and nothing is billed.
    before = gateway.balance(account.key)
    with pytest.raises(ApiError) as err:
        b"".join(el.text_to_speech.convert(GEORGE, text=text, apply_text_normalization="on"))
    assert err.value.status_code == 422
    el_spec.assert_valid("HTTPValidationError", {"detail": err.value.body["detail"]})
    assert err.value.body["detail"][0]["loc"] == ["body", "apply_text_normalization"]
    assert err.value.body["error"]["code"] == "unsupported_parameter"
    gateway.assert_not_debited(account.key, before)


def test_voice_settings_a_model_cannot_honour_are_a_422_the_client_raises_and_the_defaults_pass(el, el_spec, gateway, account):
    # sim's voice does not change with voice settings, so no embedded model lists them: asked for, they are refused, not dropped.
    text = "Settled speech."
    before = gateway.balance(account.key)
    with pytest.raises(UnprocessableEntityError) as err:
        b"".join(el.text_to_speech.convert(GEORGE, text=text, model_id="eleven_multilingual_v2", output_format="pcm_24000",
                                           voice_settings=VoiceSettings(stability=0.2)))
    el_spec.assert_valid("HTTPValidationError", {"detail": err.value.body["detail"]})
    assert err.value.body["detail"][0]["loc"] == ["body", "voice_settings", "stability"]
    assert err.value.body["error"]["code"] == "unsupported_parameter"
    gateway.assert_not_debited(account.key, before)
    # ElevenLabs' premade defaults (and a speed, which is OpenAI's own) ask for nothing: they pass, billed as usual.
    defaults = VoiceSettings(stability=0.5, similarity_boost=0.75, style=0.0, use_speaker_boost=True, speed=1.0)
    audio = b"".join(el.text_to_speech.convert(GEORGE, text=text, model_id="eleven_multilingual_v2", output_format="pcm_24000",
                                               voice_settings=defaults))
    assert len(audio) == round(len(text) * 0.06 * 24000) * 2
    gateway.assert_debited(account.key, before, len(text) * TTS_ND_PER_CHAR)


def test_the_models_list_carries_each_speech_models_configured_price(el):
    from gateway import embedded_models, published_matches_config

    configured = {m["id"]: m for m in embedded_models()}
    models = el.models.list()
    assert models
    for m in models:
        pricing = (m.model_extra or {}).get("pricing") if hasattr(m, "model_extra") else None
        assert pricing is not None, m.model_id
        published_matches_config(configured[m.model_id], pricing)
