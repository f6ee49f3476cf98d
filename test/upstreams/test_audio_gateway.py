"""Speech and transcription through Tollgate's alpha routes to Piper and faster-whisper, with the official openai
client: Piper's WAV and PCM billed by the characters sent, and a round trip (Tollgate speaks a sentence
through Piper, then transcribes it through faster-whisper) that returns the sentence, billed by the audio
time Tollgate measured."""
from __future__ import annotations

import io
import math
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


@pytest.fixture(scope="module")
def gate_wav(audio_gateway: Gateway) -> bytes:
    """Piper's WAV of the sentence, spoken through Tollgate once for the transcription tests."""
    acct = audio_gateway.account("1")
    return audio_gateway.client(acct.key).audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE,
                                                              response_format="wav").read()


def assert_billed_for(audio_gateway: Gateway, key: str, before, audio: bytes) -> None:
    after = audio_gateway.settled_balance(key, before)
    moved_nano = int((before - after) * 1_000_000_000)
    ms = wav_seconds(audio) * 1000
    assert abs(moved_nano - ms * NANO_PER_MINUTE / 60_000) <= NANO_PER_MINUTE / 60_000 + 1, (moved_nano, ms)


def test_transcription_as_text_from_a_json_only_upstream(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI,
                                                         gate_wav: bytes) -> None:
    """faster-whisper answers json and verbose_json only: Tollgate asks it for verbose_json and writes the text."""
    before = audio_gateway.balance(audio_account.key)
    out = audio_client.audio.transcriptions.create(model="whisper-base", file=("gate.wav", gate_wav, "audio/wav"),
                                                   response_format="text")
    assert out == SENTENCE + "\n"
    assert_billed_for(audio_gateway, audio_account.key, before, gate_wav)


@pytest.mark.parametrize("fmt,sep,head", [("srt", ",", "1\n"), ("vtt", ".", "WEBVTT\n\n")])
def test_subtitles_made_from_faster_whispers_segments(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI,
                                                      gate_wav: bytes, fmt: str, sep: str, head: str) -> None:
    """srt and vtt cut at faster-whisper's segments, with OpenAI's timestamps (`00:00:00,000` / `00:00:00.000`)."""
    verbose = audio_client.audio.transcriptions.create(model="whisper-base", file=("gate.wav", gate_wav, "audio/wav"),
                                                       response_format="verbose_json")
    seg = verbose.segments[0]
    before = audio_gateway.balance(audio_account.key)
    out = audio_client.audio.transcriptions.create(model="whisper-base", file=("gate.wav", gate_wav, "audio/wav"),
                                                   response_format=fmt)
    assert isinstance(out, str) and out.startswith(head)

    def ts(x: float) -> str:
        ms = round(x * 1000)
        return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}{sep}{ms % 1000:03d}"

    assert f"{ts(seg.start)} --> {ts(seg.end)}\n{SENTENCE}\n\n" in out, out
    assert out.endswith("\n\n")
    assert_billed_for(audio_gateway, audio_account.key, before, gate_wav)


def test_stream_from_an_upstream_that_does_not_stream(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI,
                                                      gate_wav: bytes) -> None:
    """stream=True: Tollgate answers the transcript.text.delta/done events itself from faster-whisper's whole reply."""
    before = audio_gateway.balance(audio_account.key)
    events = list(audio_client.audio.transcriptions.create(model="whisper-base", file=("gate.wav", gate_wav, "audio/wav"),
                                                           stream=True))
    assert [e.type for e in events][-1] == "transcript.text.done"
    assert events[-1].text == SENTENCE
    assert "".join(e.delta for e in events if e.type == "transcript.text.delta").strip() == SENTENCE
    assert_billed_for(audio_gateway, audio_account.key, before, gate_wav)


def test_elevenlabs_speech_to_text_through_faster_whisper(audio_gateway: Gateway, audio_account, gate_wav: bytes) -> None:
    """The elevenlabs client's speech_to_text: words timed within faster-whisper's segments (it gives no word times)."""
    from elevenlabs import ElevenLabs

    el = ElevenLabs(api_key=audio_account.key, base_url=audio_gateway.url + "/beta", timeout=120)
    before = audio_gateway.balance(audio_account.key)
    out = el.speech_to_text.convert(model_id="scribe_v1", file=("gate.wav", gate_wav, "audio/wav"))
    assert out.text == SENTENCE
    words = [w for w in out.words if w.type == "word"]
    assert [w.text for w in words] == SENTENCE.split()
    assert all(w.start <= w.end for w in words) and all(a.end <= b.start + 1e-9 for a, b in zip(words, words[1:]))
    # faster-whisper's segment runs past the audio (its times are in 20 ms steps, padded): no word ends after the audio does.
    # (Tollgate measures the audio in whole milliseconds, rounded up.)
    assert 0 <= words[0].start and words[-1].end <= math.ceil(wav_seconds(gate_wav) * 1000) / 1000
    assert out.language_code == "eng"
    assert_billed_for(audio_gateway, audio_account.key, before, gate_wav)


def test_a_400_from_faster_whisper_keeps_its_reason(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI,
                                                    gate_wav: bytes) -> None:
    """FastAPI wraps faster-whisper's error as {"detail": {"error": {...}}}: the client gets its reason in the
    OpenAI envelope, and nothing is billed. (A model name the server does not host.)"""
    before = audio_gateway.balance(audio_account.key)
    for fmt in ("json", "srt"):
        with pytest.raises(openai.BadRequestError) as e:
            audio_client.audio.transcriptions.create(model="whisper-missing", file=("gate.wav", gate_wav, "audio/wav"),
                                                     response_format=fmt)
        assert e.value.body["code"] == "upstream_invalid_request"
        assert "unknown model: no-such-model" in e.value.body["message"], e.value.body
    audio_gateway.assert_not_debited(audio_account.key, before)
