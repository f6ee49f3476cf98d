"""Speech and transcription through Tollgate to Piper and faster-whisper, with the official openai and elevenlabs
clients: Piper's WAV and PCM billed by the characters sent, the formats Piper lacks made by Tollgate at the
right duration from Piper's 22.05 kHz PCM, and a round trip (Tollgate speaks a sentence
through Piper, then transcribes it through faster-whisper) that returns the sentence, billed by the audio
time Tollgate measured."""
from __future__ import annotations

import io
import math
import shutil
import wave

import av
import openai
import pytest
from elevenlabs import ElevenLabs

from conftest import NANO_PER_CHAR, NANO_PER_MINUTE
from gateway import Gateway

SENTENCE = "The gate is open."
LONG = ("The gate is open, and the toll is paid. Every word you hear was spoken by Piper, measured by Tollgate, "
        "and billed by the character, down to the last nanodollar.")
GEORGE = "JBFqnCBsd6RMkjVDRZzb"  # a premade ElevenLabs voice id: Piper ignores the voice


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


def decoded_seconds(audio: bytes, fmt: str) -> float:
    """What a decoder makes of it (PyAV, the venv's own FFmpeg libraries): every frame decoded, samples counted."""
    with av.open(io.BytesIO(audio), format=fmt) as c:
        stream = c.streams.audio[0]
        samples = sum(f.samples for f in c.decode(stream))
        return samples / stream.rate


def test_speech_durations_through_tollgate(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI) -> None:
    """Piper's pcm is 22.05 kHz (its WAV header says so); Tollgate, told `speech_pcm_rate: 22050`, resamples it for
    OpenAI's 24 kHz pcm and every ElevenLabs format, and makes mp3 itself (Piper's server cannot without ffmpeg).
    Each must last as long as Piper's own WAV of the text. Piper draws each phoneme's length at random (a short
    sentence varies by ±2.5% from request to request); over this longer text it varies by about 1%, so 4% holds
    every honest reply while reading 22.05 kHz as 24 kHz (8% short) fails. mp3 may also be longer by LAME's delay
    and its last frame's padding, which a decoder without a gapless tag keeps: at most 0.15 s."""
    text = LONG
    chars = len(text)
    refs = []
    for _ in range(2):
        wav = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=text, response_format="wav").read()
        with wave.open(io.BytesIO(wav)) as w:
            assert w.getframerate() == 22050
        refs.append(wav_seconds(wav))
    reference = sum(refs) / len(refs)

    def close(seconds: float, what: str, padding: float = 0.0) -> None:
        assert reference * 0.96 <= seconds <= reference * 1.04 + padding, f"{what}: {seconds:.3f} s, Piper's wav {refs}"

    before = audio_gateway.balance(audio_account.key)
    pcm = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=text, response_format="pcm").read()
    close(len(pcm) / 2 / 24000, "openai pcm (24 kHz)")
    mp3 = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=text, response_format="mp3").read()
    assert mp3[:3] == b"ID3" or (mp3[0] == 0xFF and mp3[1] & 0xE0 == 0xE0)
    close(decoded_seconds(mp3, "mp3"), "openai mp3", 0.15)
    audio_gateway.assert_debited(audio_account.key, before, 2 * chars * NANO_PER_CHAR)

    el = ElevenLabs(api_key=audio_account.key, base_url=audio_gateway.url + "/beta", timeout=60)
    before = audio_gateway.balance(audio_account.key)
    pcm16 = b"".join(el.text_to_speech.convert(GEORGE, text=text, model_id="piper-joe", output_format="pcm_16000"))
    close(len(pcm16) / 2 / 16000, "elevenlabs pcm_16000")
    mp3_44 = b"".join(el.text_to_speech.convert(GEORGE, text=text, model_id="piper-joe"))  # the default mp3_44100_128
    with av.open(io.BytesIO(mp3_44), format="mp3") as c:
        assert c.streams.audio[0].rate == 44100
    close(decoded_seconds(mp3_44, "mp3"), "elevenlabs mp3_44100_128", 0.15)
    audio_gateway.assert_debited(audio_account.key, before, 2 * chars * NANO_PER_CHAR)

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


def test_speech_opus_and_aac_made_by_tollgate(audio_gateway: Gateway, audio_account, audio_client: openai.OpenAI) -> None:
    """Piper's server makes neither (its config says wav and pcm): Tollgate makes Ogg Opus itself, and aac with ffmpeg
    when the gateway's host has it (else a 400 naming the formats available, nothing billed)."""
    before = audio_gateway.balance(audio_account.key)
    opus = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE, response_format="opus").read()
    assert opus[:4] == b"OggS" and b"OpusHead" in opus[:64]
    assert decoded_seconds(opus, "ogg") > 0.5
    audio_gateway.assert_debited(audio_account.key, before, len(SENTENCE) * NANO_PER_CHAR)
    before = audio_gateway.balance(audio_account.key)
    if shutil.which("ffmpeg"):
        aac = audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE, response_format="aac").read()
        assert aac[0] == 0xFF and aac[1] & 0xF6 == 0xF0, "ADTS"
        assert decoded_seconds(aac, "aac") > 0.5
        audio_gateway.assert_debited(audio_account.key, before, len(SENTENCE) * NANO_PER_CHAR)
    else:
        with pytest.raises(openai.BadRequestError) as e:
            audio_client.audio.speech.create(model="piper-joe", voice="alloy", input=SENTENCE, response_format="aac").read()
        assert "Available: 'mp3', 'opus', 'flac', 'wav', 'pcm'." in e.value.body["message"], e.value.body
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


def ffmpeg(audio: bytes, *args: str) -> bytes:
    """ffmpeg's output for this input, through a file (an MP3's Info frame is filled in only in a seekable output)."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = f"{d}/out"
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-i", "pipe:0", *args, out], input=audio, capture_output=True, check=True)
        with open(out, "rb") as f:
            return f.read()


def xing_frames(mp3: bytes, frames: int) -> bytes:
    """The MP3 with its Xing/Info frame claiming `frames` frames (the header a length reader believes)."""
    at = mp3.find(b"Info")
    at = at if 0 <= at < 4096 else mp3.find(b"Xing")
    assert int.from_bytes(mp3[at + 4:at + 8], "big") & 1, "no frame count in the Info frame"
    return mp3[:at + 8] + frames.to_bytes(4, "big") + mp3[at + 12:]


@pytest.mark.skipif(not shutil.which("ffmpeg"), reason="ffmpeg makes the MP3")
def test_mp3_with_a_lying_xing_header_is_billed_by_what_faster_whisper_decodes(audio_gateway: Gateway, audio_account,
                                                                              audio_client: openai.OpenAI, gate_wav: bytes) -> None:
    """The MP3 with its Xing header saying it is 1 frame long: faster-whisper decodes the whole speech, and Tollgate bills
    the frames it counted, not the header (within two frames and LAME's 1,105-sample priming). (The same file saying
    10 M frames is billed its real length too, but faster-whisper-server did not answer it within the client's timeout.)"""
    mp3 = ffmpeg(gate_wav, "-c:a", "libmp3lame", "-b:a", "32k", "-f", "mp3")
    seconds = decoded_seconds(mp3, "mp3")
    rate = av.open(io.BytesIO(mp3), format="mp3").streams.audio[0].rate
    frame = (1152 if rate > 24_000 else 576) / rate
    tol_ms = (2 * frame + 1105 / rate) * 1000
    el = ElevenLabs(api_key=audio_account.key, base_url=audio_gateway.url + "/beta", timeout=120)
    for frames in (1,):
        lying = xing_frames(mp3, frames)
        for route in ("alpha", "beta"):
            before = audio_gateway.balance(audio_account.key)
            if route == "alpha":
                text = audio_client.audio.transcriptions.create(model="whisper-base", file=("gate.mp3", lying, "audio/mpeg")).text
            else:
                text = el.speech_to_text.convert(model_id="scribe_v1", file=("gate.mp3", lying, "audio/mpeg")).text
            assert text.strip() == SENTENCE, (frames, route, text)
            after = audio_gateway.settled_balance(audio_account.key, before)
            billed_ms = int((before - after) * 1_000_000_000) * 60_000 / NANO_PER_MINUTE
            assert -1 <= billed_ms - seconds * 1000 <= tol_ms + 1, (frames, route, billed_ms, seconds)


@pytest.mark.skipif(not shutil.which("ffmpeg"), reason="ffmpeg resamples the speech to 16 kHz")
def test_raw_pcm_with_file_format_is_transcribed_by_faster_whisper(audio_gateway: Gateway, audio_account, gate_wav: bytes) -> None:
    """file_format=pcm_s16le_16: the raw PCM goes to faster-whisper in a WAV header, is heard, and is billed bytes ÷ 32,000 s;
    an MP3 declared raw is refused by name (422), nothing billed."""
    pcm = ffmpeg(gate_wav, "-ac", "1", "-ar", "16000", "-f", "s16le")
    el = ElevenLabs(api_key=audio_account.key, base_url=audio_gateway.url + "/beta", timeout=120)
    before = audio_gateway.balance(audio_account.key)
    out = el.speech_to_text.convert(model_id="scribe_v1", file=("gate.pcm", pcm, "application/octet-stream"), file_format="pcm_s16le_16")
    assert out.text == SENTENCE
    audio_gateway.assert_debited(audio_account.key, before, math.ceil(math.ceil(len(pcm) / 32) * NANO_PER_MINUTE / 60_000))
    from elevenlabs.core.api_error import ApiError
    mp3 = ffmpeg(gate_wav, "-c:a", "libmp3lame", "-f", "mp3")
    before = audio_gateway.balance(audio_account.key)
    with pytest.raises(ApiError) as e:
        el.speech_to_text.convert(model_id="scribe_v1", file=("gate.mp3", mp3, "audio/mpeg"), file_format="pcm_s16le_16")
    assert e.value.status_code == 422 and "MP3" in str(e.value.body), e.value.body
    audio_gateway.assert_not_debited(audio_account.key, before)
