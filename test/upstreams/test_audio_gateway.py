"""Speech and transcription through Tollgate's alpha routes to Piper and faster-whisper, with the official openai
client: Piper's WAV and PCM billed by the characters sent, and a round trip (Tollgate speaks a sentence
through Piper, then transcribes it through faster-whisper) that returns the sentence, billed by the audio
time Tollgate measured."""
from __future__ import annotations

import io
import shutil
import wave

import openai
import pytest

from conftest import NANO_PER_CHAR, NANO_PER_MINUTE
from gateway import Gateway

SENTENCE = "The gate is open."


@pytest.fixture
def audio_account(audio_gateway: Gateway):
    return audio_gateway.account("5")


@pytest.fixture
def audio_client(audio_gateway: Gateway, audio_account) -> openai.OpenAI:
    return audio_gateway.client(audio_account.key)


def wav_seconds(audio: bytes) -> float:
    with wave.open(io.BytesIO(audio)) as w:
        return w.getnframes() / w.getframerate()


def test_speech_wav_billed_by_characters(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI) -> None:
    before = audio_gateway.balance(audio_account.key)
    audio = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE, response_format="wav").read()
    assert audio[:4] == b"RIFF" and audio[8:12] == b"WAVE"
    assert 0.5 < wav_seconds(audio) < 5
    audio_gateway.assert_debited(audio_account.key, before, len(SENTENCE) * NANO_PER_CHAR)


def test_speech_pcm(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI) -> None:
    before = audio_gateway.balance(audio_account.key)
    audio = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE, response_format="pcm").read()
    assert audio[:4] != b"RIFF" and len(audio) > 10_000 and len(audio) % 2 == 0
    audio_gateway.assert_debited(audio_account.key, before, len(SENTENCE) * NANO_PER_CHAR)


def test_round_trip_speech_to_text(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI) -> None:
    audio = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE, response_format="wav").read()
    before = audio_gateway.balance(audio_account.key)
    out = audio_client.audio.transcriptions.create(model="whisper-base", file=("gate.wav", audio, "audio/wav"))
    assert out.text.strip() == SENTENCE
    after = audio_gateway.settled_balance(audio_account.key, before)
    moved_nano = int((before - after) * 1_000_000_000)
    ms = wav_seconds(audio) * 1000
    # Tollgate measures the upload's duration itself (to the millisecond): the bill is that time at the minute price.
    assert abs(moved_nano - ms * NANO_PER_MINUTE / 60_000) <= NANO_PER_MINUTE / 60_000 + 1, (moved_nano, ms)


def test_speech_mp3(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI) -> None:
    """Piper's server makes mp3 only with Debian's ffmpeg on the host (it converts its WAV); without it the
    request must fail in the envelope and bill nothing. Tollgate converting for such an upstream is not built."""
    before = audio_gateway.balance(audio_account.key)
    if shutil.which("ffmpeg"):
        audio = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE, response_format="mp3").read()
        assert audio[:3] == b"ID3" or (audio[0] == 0xFF and audio[1] & 0xE0 == 0xE0)
        audio_gateway.assert_debited(audio_account.key, before, len(SENTENCE) * NANO_PER_CHAR)
    else:
        with pytest.raises(openai.APIStatusError):
            audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE, response_format="mp3").read()
        audio_gateway.assert_not_debited(audio_account.key, before)


@pytest.mark.xfail(strict=True, reason="faster-whisper-server answers only json and verbose_json; Tollgate passes "
                   "response_format on and does not yet ask for verbose_json and render text/srt/vtt itself (issue 16)")
def test_transcription_as_text_from_a_json_only_upstream(audio_client: openai.OpenAI) -> None:
    audio = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE, response_format="wav").read()
    out = audio_client.audio.transcriptions.create(model="whisper-base", file=("gate.wav", audio, "audio/wav"),
                                                   response_format="text")
    assert str(out).strip() == SENTENCE


def test_a_400_from_faster_whisper_keeps_its_reason(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI) -> None:
    """FastAPI wraps faster-whisper's error as {"detail": {"error": {...}}}: the client gets its reason in the
    OpenAI envelope, and nothing is billed. (srt is refused there today; see the xfail above.)"""
    audio = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE, response_format="wav").read()
    before = audio_gateway.balance(audio_account.key)
    with pytest.raises(openai.BadRequestError) as e:
        audio_client.audio.transcriptions.create(model="whisper-base", file=("gate.wav", audio, "audio/wav"), response_format="srt")
    assert e.value.body["code"] == "upstream_invalid_request"
    assert "Unsupported response_format: srt" in e.value.body["message"], e.value.body
    audio_gateway.assert_not_debited(audio_account.key, before)
