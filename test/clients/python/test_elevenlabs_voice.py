"""The official `elevenlabs` Python client on the voice surface issue 24 measured: every output format of the
client's own literal, the premade voices its examples name, and every `speech_to_text.convert` parameter."""
from __future__ import annotations

import json
import subprocess
import tempfile
import typing

import pytest
from elevenlabs.core.api_error import ApiError
from elevenlabs.text_to_speech.types.text_to_speech_convert_request_output_format import TextToSpeechConvertRequestOutputFormat

from test_elevenlabs import GEORGE, TTS_ND_PER_CHAR, el, el_spec  # noqa: F401  (fixtures)

# The client's literal (its Union's first member), not a copy of it: a client that offers more is tested on more.
CLIENT_FORMATS = typing.get_args(typing.get_args(TextToSpeechConvertRequestOutputFormat)[0])
RAW = {"pcm": "s16le", "ulaw": "mulaw", "alaw": "alaw"}
CONTAINERS = {"mp3": ("mp3", "mp3"), "opus": ("ogg", "opus"), "wav": ("wav", "pcm_s16le"), "pcm": ("s16le", "pcm_s16le"),
              "ulaw": ("mulaw", "pcm_mulaw"), "alaw": ("alaw", "pcm_alaw")}


def probe(audio: bytes, fmt: str) -> tuple[dict, float]:
    """ffprobe's container and stream of the audio, and its duration decoded by ffmpeg (samples / rate)."""
    codec, rate = fmt.split("_")[:2]
    raw = ["-f", RAW[codec], "-ar", rate, "-ac", "1"] if codec in RAW else []
    with tempfile.NamedTemporaryFile() as f:
        f.write(audio)
        f.flush()
        meta = json.loads(subprocess.run(["ffprobe", "-v", "error", *raw, "-show_entries", "format=format_name:stream=codec_name,sample_rate,channels",
                                          "-of", "json", f.name], check=True, capture_output=True).stdout)
        pcm = subprocess.run(["ffmpeg", "-v", "error", *raw, "-i", f.name, "-f", "s16le", "-ac", "1", "-ar", "48000", "-"],
                             check=True, capture_output=True).stdout
    return meta, len(pcm) / 2 / 48000


@pytest.mark.parametrize("fmt", CLIENT_FORMATS)
def test_every_output_format_of_the_clients_literal_is_made_in_its_container_rate_and_length(el, gateway, account, fmt):
    text = "Every format the client offers."
    before = gateway.balance(account.key)
    audio = b"".join(el.text_to_speech.convert(GEORGE, text=text, model_id="eleven_multilingual_v2", output_format=fmt))
    meta, seconds = probe(audio, fmt)
    codec, rate, *kbps = fmt.split("_")
    stream = meta["streams"][0]
    assert (meta["format"]["format_name"], stream["codec_name"]) == CONTAINERS[codec]
    assert stream["channels"] == 1
    # Opus always decodes at 48 kHz (its header keeps the input rate apart); LAME makes 32 kbit/s at 22.05 kHz.
    expected_rate = {"opus_48000": 48000, "mp3_44100_32": 22050}.get(fmt if fmt.startswith("mp3") else f"{codec}_{rate}", int(rate))
    assert int(stream["sample_rate"]) == expected_rate
    if codec == "wav":
        assert audio[:4] == b"RIFF" and int.from_bytes(audio[24:28], "little") == int(rate)
        assert int.from_bytes(audio[40:44], "little") == len(audio) - 44, "the header states the data's real size"
    # sim speaks 60 ms a character; MP3 adds LAME's delay and padding (under a tenth of a second)
    assert seconds == pytest.approx(len(text) * 0.06, abs=0.1 if codec == "mp3" else 0.002)
    gateway.assert_debited(account.key, before, len(text) * TTS_ND_PER_CHAR)


# The premade voices the clients' own examples speak with: George (the Python and Node READMEs) and Rachel (older examples).
EXAMPLE_VOICES = {"JBFqnCBsd6RMkjVDRZzb": "George", "21m00Tcm4TlvDq8ikWAM": "Rachel"}


def test_the_premade_voices_of_the_clients_examples_are_on_the_first_page_of_voices_search_and_speak(el, gateway, account):
    listed = {v.voice_id: v for v in el.voices.search().voices}  # the client's defaults: the first page of 10
    for voice_id, name in EXAMPLE_VOICES.items():
        assert voice_id in listed, f"{name} ({voice_id}) is on the first page of GET /v2/voices"
        assert listed[voice_id].name == name and listed[voice_id].category == "premade"
        assert el.voices.get(voice_id).name == name
        text = f"Hello from {name}."
        before = gateway.balance(account.key)
        audio = b"".join(el.text_to_speech.convert(voice_id, text=text, model_id="eleven_multilingual_v2", output_format="pcm_16000"))
        assert len(audio) == round(len(text) * 0.06 * 16000) * 2 and any(audio)
        gateway.assert_debited(account.key, before, len(text) * TTS_ND_PER_CHAR)
