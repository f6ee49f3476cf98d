"""OpenAI audio through the official client: speech (whole and with_streaming_response), transcriptions and translations
of that speech on the embedded default's sim-tts and sim-stt; every call debits exactly its priced usage."""
from __future__ import annotations

import io
import json
import math
import wave

import openai
import pytest

PER_CHAR_NANO = 15_000      # sim-tts: $15 per million characters
PER_MS_NANO = 100           # sim-stt: $0.006 per minute
TEXT = "The gateway speaks, and then it hears itself."


def chars(text: str) -> int:
    return len(text)  # Python strings count code points, as Tollgate does


def wav_ms(data: bytes) -> int:
    with wave.open(io.BytesIO(data)) as w:
        return math.ceil(w.getnframes() * 1000 / w.getframerate())


def test_speech_returns_wav_audio_of_sixty_ms_a_character_and_bills_its_characters(gateway, account, client):
    before = gateway.balance(account.key)
    audio = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="wav")
    data = audio.read()
    assert audio.response.headers["content-type"] == "audio/wav"
    assert wav_ms(data) == chars(TEXT) * 60
    gateway.assert_debited(account.key, before, chars(TEXT) * PER_CHAR_NANO)


@pytest.mark.parametrize("fmt,ctype", [("mp3", "audio/mpeg"), ("opus", "audio/ogg"), ("aac", "audio/aac"), ("flac", "audio/flac"), ("pcm", "audio/pcm")])
def test_streamed_speech_in_every_format_arrives_in_pieces_and_bills_its_characters(gateway, account, client, fmt, ctype):
    before = gateway.balance(account.key)
    pieces = []
    with client.audio.speech.with_streaming_response.create(model="gpt-4o-mini-tts", voice="coral", input=TEXT, response_format=fmt) as r:
        assert r.headers["content-type"] == ctype
        for piece in r.iter_bytes():
            pieces.append(piece)
    data = b"".join(pieces)
    assert len(data) > 0
    if fmt == "pcm":
        assert len(data) == chars(TEXT) * 1440 * 2  # 24 kHz, 16-bit
    gateway.assert_debited(account.key, before, chars(TEXT) * PER_CHAR_NANO)


def test_transcribing_speech_gives_its_text_back_and_bills_the_measured_minutes(gateway, account, client, spec):
    data = client.audio.speech.create(model="tts-1-hd", voice="nova", input=TEXT, response_format="wav").read()
    before = gateway.balance(account.key)
    raw = client.audio.transcriptions.with_raw_response.create(model="whisper-1", file=("speech.wav", data, "audio/wav"))
    spec.assert_valid("CreateTranscriptionResponseJson", raw.http_response.json())
    assert raw.parse().text == TEXT
    gateway.assert_debited(account.key, before, wav_ms(data) * PER_MS_NANO)

    before = gateway.balance(account.key)
    raw = client.audio.transcriptions.with_raw_response.create(
        model="gpt-4o-transcribe", file=("speech.wav", data, "audio/wav"), response_format="verbose_json", timestamp_granularities=["word", "segment"])
    body = raw.http_response.json()
    spec.assert_valid("CreateTranscriptionResponseVerboseJson", body)
    v = raw.parse()
    assert v.text == TEXT and v.duration == round(chars(TEXT) * 0.06, 3)
    assert [w.word for w in v.words][:3] == ["The", "gateway", "speaks"]
    assert v.words[-1].end == v.duration
    gateway.assert_debited(account.key, before, wav_ms(data) * PER_MS_NANO)

    text = client.audio.transcriptions.create(model="whisper-1", file=("speech.wav", data, "audio/wav"), response_format="text")
    assert text.strip() == TEXT


def test_a_streamed_transcription_sends_deltas_then_done(gateway, account, client, spec):
    data = client.audio.speech.create(model="tts-1", voice="echo", input=TEXT, response_format="flac").read()
    events = list(client.audio.transcriptions.create(model="gpt-4o-mini-transcribe", file=("speech.flac", data, "audio/flac"), stream=True))
    assert [e.type for e in events][-1] == "transcript.text.done"
    assert events[-1].text == TEXT
    for e in events:
        spec.assert_valid("TranscriptTextDeltaEvent" if e.type == "transcript.text.delta" else "TranscriptTextDoneEvent", json.loads(e.model_dump_json(exclude_none=True)))


def test_translation_to_english(gateway, account, client, spec):
    data = client.audio.speech.create(model="tts-1", voice="sage", input=TEXT, response_format="mp3").read()
    before = gateway.balance(account.key)
    raw = client.audio.translations.with_raw_response.create(model="whisper-1", file=("speech.mp3", data, "audio/mpeg"), response_format="verbose_json")
    body = raw.http_response.json()
    spec.assert_valid("CreateTranslationResponseVerboseJson", body)
    assert body["text"] == TEXT and body["language"] == "english"
    # billed by the duration Tollgate read from the mp3 (LAME pads it past 60 ms a character): the same the
    # upstream reports (to the millisecond, which it rounds and Tollgate rounds up), at 100 nanodollars a ms
    after = gateway.settled_balance(account.key, before)
    moved = int((before - after) * 1_000_000_000)
    assert moved % PER_MS_NANO == 0
    assert abs(moved // PER_MS_NANO - body["duration"] * 1000) <= 1
    assert body["duration"] >= chars(TEXT) * 0.06


def test_refusals_are_openai_errors_and_bill_nothing(gateway, account, client):
    before = gateway.balance(account.key)
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.speech.create(model="tts-1", voice="alloy", input="hi", response_format="ogg")  # type: ignore[arg-type]
    assert e.value.code == "invalid_value" and e.value.param == "response_format"
    with pytest.raises(openai.NotFoundError) as nf:
        client.audio.speech.create(model="tts-2", voice="alloy", input="hi")
    assert nf.value.code == "model_not_found" and "tts-1" in nf.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        client.audio.transcriptions.create(model="whisper-1", file=("a.wav", b"not audio at all" * 50, "audio/wav"))
    assert bad.value.code == "invalid_audio"
    assert gateway.balance(account.key) == before


def test_a_cloned_voice_speaks_by_its_id_with_the_clone_model_and_is_not_found_for_another_account(gateway, account, client, spec):
    import struct

    from elevenlabs import ElevenLabs

    def sample(seed: int) -> bytes:
        data = b"".join(struct.pack("<h", (i * (seed + 7) * 37) % 16000 - 8000) for i in range(1600))
        return b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) \
            + b"data" + struct.pack("<I", len(data)) + data

    el = ElevenLabs(api_key=account.key, base_url=gateway.url + "/beta", timeout=30)
    voice_id = el.voices.ivc.create(name="Narrator", files=[("a.wav", sample(1), "audio/wav"), ("b.wav", sample(2), "audio/wav")]).voice_id
    clone_per_char = 30_000  # sim-tts-clone: $30 per million characters

    for voice in ({"id": voice_id}, voice_id):
        before = gateway.balance(account.key)
        data = client.audio.speech.create(model="tts-1", voice=voice, input=TEXT, response_format="wav").read()
        assert wav_ms(data) == chars(TEXT) * 60
        gateway.assert_debited(account.key, before, chars(TEXT) * clone_per_char)

    # Another account: the voice is not found (404, OpenAI's envelope), and nothing is billed.
    other = gateway.account("5")
    other_client = gateway.client(other.key)
    before = gateway.balance(other.key)
    for voice in ({"id": voice_id}, voice_id):
        with pytest.raises(openai.NotFoundError) as nf:
            other_client.audio.speech.create(model="tts-1", voice=voice, input=TEXT)
        assert nf.value.code == "voice_not_found" and nf.value.param == "voice"
        spec.assert_valid("ErrorResponse", nf.value.response.json())
    with pytest.raises(openai.BadRequestError) as bad:
        other_client.audio.speech.create(model="tts-1", voice="nobody", input=TEXT)
    assert bad.value.code == "invalid_value"
    gateway.assert_not_debited(other.key, before)
