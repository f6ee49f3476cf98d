"""The audio servers on their own, before any Tollgate route uses them: Piper speaks a sentence as WAV and
faster-whisper transcribes it back. A failure here is a broken set-up, not a Tollgate bug."""
from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
import uuid
import wave

import pytest

from servers import WHISPER_MODEL, Server

SENTENCE = "The gate is open."


def speak(piper: Server, text: str, fmt: str = "wav") -> tuple[str, bytes]:
    req = urllib.request.Request(piper.url + "/v1/audio/speech", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"model": "tts-1", "voice": "alloy", "input": text, "response_format": fmt}).encode())
    with urllib.request.urlopen(req, timeout=60) as res:
        return res.headers.get("content-type", ""), res.read()


def transcribe(whisper: Server, audio: bytes, field: str = "model_name") -> dict:
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"\r\n\r\n{WHISPER_MODEL}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"response_format\"\r\n\r\nverbose_json\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            f"Content-Type: audio/wav\r\n\r\n").encode() + audio + f"\r\n--{boundary}--\r\n".encode()
    req = urllib.request.Request(whisper.url + "/v1/audio/transcriptions", method="POST", data=body,
                                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(req, timeout=120) as res:
        return json.loads(res.read())


def test_piper_speaks_wav(piper: Server) -> None:
    if piper.unavailable:
        pytest.fail(piper.unavailable)
    ctype, audio = speak(piper, SENTENCE)
    assert ctype.startswith("audio/wav")
    with wave.open(io.BytesIO(audio)) as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2
        assert 0.5 < w.getnframes() / w.getframerate() < 5


def test_whisper_transcribes_pipers_speech(piper: Server, whisper: Server) -> None:
    for s in (piper, whisper):
        if s.unavailable:
            pytest.fail(s.unavailable)
    _, audio = speak(piper, SENTENCE)
    out = transcribe(whisper, audio)
    assert out["text"].strip() == SENTENCE
    assert out["segments"] and out["duration"] > 0.5


def test_whisper_reads_the_model_from_model_name_only(piper: Server, whisper: Server) -> None:
    """Why Tollgate's `transcription.model_field` exists: named in `model`, the model is not seen (the server falls
    back to `whisper-1`, which it does not host)."""
    for s in (piper, whisper):
        if s.unavailable:
            pytest.fail(s.unavailable)
    _, audio = speak(piper, SENTENCE)
    with pytest.raises(urllib.error.HTTPError) as e:
        transcribe(whisper, audio, field="model")
    assert e.value.code == 400
    assert "unknown model: whisper-1" in e.value.read().decode()
