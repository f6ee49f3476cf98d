"""The official `elevenlabs` Python client on the voice surface issue 24 measured: every output format of the
client's own literal, the premade voices its examples name, and every `speech_to_text.convert` parameter."""
from __future__ import annotations

import json
import struct
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


# Every parameter of the client's speech_to_text.convert, at a value that asks for something. Honoured here:
# done by Tollgate or sent on by the embedded default (200, billed); the others: refused by name (422), nothing billed.
# A parameter the client gains that is missing here fails the walk (KeyError): it must be decided, not dropped.
STT_HONOURED = {"language_code": "en", "timestamps_granularity": "character", "temperature": 0.5, "file_format": "pcm_s16le_16"}
STT_REFUSED = {
    "secondary_language_codes": ["de"], "numbers_format": "words", "transcript_edit": "Make it formal.", "tag_audio_events": False,
    "num_speakers": 2, "diarize": True, "diarization_threshold": 0.3, "additional_formats": [{"format": "srt"}],
    "cloud_storage_url": "https://example.com/a.wav", "source_url": "https://example.com/a.wav", "webhook": True, "webhook_id": "hook",
    "seed": 7, "use_multi_channel": True, "multichannel_output_style": "combined", "webhook_metadata": '{"job": 1}',
    "entity_detection": "all", "no_verbatim": True, "use_speaker_library": True, "detect_speaker_roles": True,
    "entity_redaction": "pii", "entity_redaction_mode": "redacted", "keyterms": ["Tollgate"],
}
STT_NOT_BODY = {"self", "model_id", "file", "request_options", "token", "enable_logging"}
STT_ND_PER_MIN = 6_000_000  # sim-stt: $0.006 a minute


def stt_params() -> list[str]:
    import inspect
    from elevenlabs.speech_to_text.client import SpeechToTextClient
    return [n for n in inspect.signature(SpeechToTextClient.convert).parameters if n not in STT_NOT_BODY]


def test_every_speech_to_text_parameter_of_the_client_is_honoured_or_refused_by_name(el, gateway, account):
    pcm = b"".join(el.text_to_speech.convert(GEORGE, text="Keyterms matter.", output_format="pcm_24000"))
    wav_file = b"RIFF" + (36 + len(pcm)).to_bytes(4, "little") + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 24000, 48000, 2, 16) \
        + b"data" + len(pcm).to_bytes(4, "little") + pcm
    billed = -(-(-(-len(pcm) * 1000 // 48000)) * STT_ND_PER_MIN // 60_000)
    params = stt_params()
    assert set(params) == set(STT_HONOURED) | set(STT_REFUSED), "the client's list changed: decide the new parameters"
    for name in params:
        before = gateway.balance(account.key)
        if name in STT_HONOURED:
            if name == "file_format":
                continue  # Tollgate's own reading of the upload (raw 16 kHz PCM): the beta speech-to-text file tests cover it
            result = el.speech_to_text.convert(model_id="scribe_v1", file=("speech.wav", wav_file, "audio/wav"), **{name: STT_HONOURED[name]})
            assert result.text == "Keyterms matter.", name
            gateway.assert_debited(account.key, before, billed)
            continue
        with pytest.raises(ApiError) as err:
            el.speech_to_text.convert(model_id="scribe_v1", file=("speech.wav", wav_file, "audio/wav"), **{name: STT_REFUSED[name]})
        assert err.value.status_code == 422, name
        assert err.value.body["detail"][0]["loc"] == ["body", name], name
        assert err.value.body["error"]["code"] == "unsupported_parameter", name
        gateway.assert_not_debited(account.key, before, settle_wait=0)
    # at their defaults they ask for nothing: taken by any model, billed as ever
    before = gateway.balance(account.key)
    result = el.speech_to_text.convert(model_id="scribe_v1", file=("speech.wav", wav_file, "audio/wav"), tag_audio_events=True, no_verbatim=False,
                                       diarize=False, use_multi_channel=False, webhook=False, keyterms=[], detect_speaker_roles=False)
    assert result.text == "Keyterms matter."
    gateway.assert_debited(account.key, before, billed)


@pytest.mark.parametrize("name", ["source_url", "cloud_storage_url"])
def test_a_url_instead_of_a_file_is_a_clear_422_and_nothing_is_fetched(el, gateway, account, name):
    before = gateway.balance(account.key)
    with pytest.raises(ApiError) as err:
        el.speech_to_text.convert(model_id="scribe_v1", **{name: "http://127.0.0.1:9/secret.wav"})
    assert err.value.status_code == 422
    assert err.value.body["detail"][0]["loc"] == ["body", name]
    assert "does not fetch audio from a URL" in err.value.body["error"]["message"]
    gateway.assert_not_debited(account.key, before)
