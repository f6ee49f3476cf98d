"""The parameter walk: for each served route of a covered group, every parameter the official Python client's
method can send (read from its signature) is known to Tollgate as honoured (passed on to the upstream, or done
by Tollgate, or asking for nothing that changes the answer) or refused. A parameter the client has that this
table does not know fails the test; each refused one is sent with a value that asks for something and must be
refused by name (400 `unsupported_parameter` in the alpha family, 422 in the beta family), billing nothing."""
from __future__ import annotations

import inspect
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from elevenlabs import ElevenLabs
from elevenlabs.core.api_error import ApiError

from gateway import HELLO, Gateway

GEORGE = "JBFqnCBsd6RMkjVDRZzb"
# What every method takes that is not a parameter of the request.
NOT_PARAMETERS = {"self", "extra_headers", "extra_query", "extra_body", "timeout", "request_options"}


def wav(seconds: float = 0.5, rate: int = 16000) -> bytes:
    n = round(seconds * rate)
    data = b"".join(struct.pack("<h", (i * 97) % 12000 - 6000) for i in range(n))
    return b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16) + b"data" + struct.pack("<I", len(data)) + data


@dataclass
class Walk:
    family: str  # "alpha" (openai) or "beta" (elevenlabs)
    method: str  # the client method, dotted from the client
    route: str
    honoured: set[str]  # passed on, done by Tollgate, or asking for nothing that changes the answer
    refused: dict[str, Any] = field(default_factory=dict)  # parameter -> a value that asks for something
    args: Callable[[], dict[str, Any]] = lambda: {}


TTS_HONOURED = {"voice_id", "text", "output_format", "model_id", "voice_settings", "language_code", "seed", "previous_text", "next_text",
                "previous_request_ids", "next_request_ids", "apply_text_normalization", "apply_language_text_normalization",
                # ask for nothing here: no history is kept, no latency mode trades quality, no professional voices
                "enable_logging", "optimize_streaming_latency", "use_pvc_as_ivc"}
TTS_REFUSED = {"pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": "pd_1", "version_id": "v_1"}], "audio_effects": {"type": "reverb"}}
STS_HONOURED = {"voice_id", "audio", "model_id", "output_format", "voice_settings", "seed", "remove_background_noise", "file_format",
                "enable_logging", "optimize_streaming_latency"}


def tts_args() -> dict[str, Any]:
    return {"voice_id": GEORGE, "text": "Hello."}


def sts_args() -> dict[str, Any]:
    return {"voice_id": GEORGE, "audio": ("a.wav", wav(), "audio/wav")}


WALKS = [
    Walk("alpha", "chat.completions.create", "POST /v1/chat/completions",
         honoured={"messages", "model", "frequency_penalty", "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata", "n",
                   "parallel_tool_calls", "presence_penalty", "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "reasoning_effort",
                   "response_format", "safety_identifier", "seed", "service_tier", "stop", "store", "stream", "stream_options", "temperature",
                   "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity"},
         refused={"audio": {"voice": "alloy", "format": "wav"}, "function_call": "auto", "functions": [{"name": "f", "parameters": {"type": "object"}}],
                  "modalities": ["text", "audio"], "prediction": {"type": "content", "content": "x"}, "web_search_options": {},
                  "moderation": {"model": "omni-moderation-latest"}},
         args=lambda: {"model": "sim-chat", "messages": HELLO, "max_tokens": 8}),
    Walk("alpha", "completions.create", "POST /v1/completions",
         honoured={"model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty", "seed",
                   "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user"}),
    Walk("alpha", "embeddings.create", "POST /v1/embeddings", honoured={"input", "model", "dimensions", "encoding_format", "user"}),
    Walk("alpha", "responses.create", "POST /v1/responses",
         honoured={"input", "instructions", "max_output_tokens", "metadata", "model", "parallel_tool_calls", "prompt_cache_options",
                   "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store", "stream", "stream_options", "temperature",
                   "text", "tool_choice", "tools", "top_p", "user", "image", "access_programs"},
         refused={"background": True, "conversation": "conv_1", "previous_response_id": "resp_1", "prompt_cache_key": "k",
                  "prompt": {"id": "pmpt_1"}, "max_tool_calls": 3, "context_management": [{"type": "compaction"}],
                  "moderation": {"model": "omni-moderation-latest"}, "background_options": {"completion_window": "2h"},
                  "include": ["message.output_text.logprobs"], "truncation": "auto", "top_logprobs": 2},
         args=lambda: {"model": "sim-chat", "input": "Hello.", "max_output_tokens": 16}),
    Walk("alpha", "audio.speech.create", "POST /v1/audio/speech",
         honoured={"input", "model", "voice", "instructions", "response_format", "speed", "stream_format"}),
    # Sent on to the transcription upstream as given (its contract: docs/upstreams.md).
    Walk("alpha", "audio.transcriptions.create", "POST /v1/audio/transcriptions",
         honoured={"file", "model", "chunking_strategy", "include", "keywords", "known_speaker_names", "known_speaker_references", "language",
                   "languages", "prompt", "response_format", "stream", "temperature", "timestamp_granularities"}),
    Walk("alpha", "audio.translations.create", "POST /v1/audio/translations", honoured={"file", "model", "prompt", "response_format", "temperature"}),
    Walk("alpha", "files.create", "POST /v1/files", honoured={"file", "purpose", "expires_after"},
         args=lambda: {"file": ("in.jsonl", b'{"custom_id": "a"}\n'), "purpose": "batch"}),
    Walk("alpha", "files.list", "GET /v1/files", honoured={"after", "limit", "order", "purpose"}),
    Walk("alpha", "batches.create", "POST /v1/batches", honoured={"completion_window", "endpoint", "input_file_id", "metadata", "output_expires_after"},
         args=lambda: {"input_file_id": "file-none", "endpoint": "/v1/chat/completions", "completion_window": "24h"}),
    Walk("alpha", "batches.list", "GET /v1/batches", honoured={"after", "limit"}),
    Walk("alpha", "realtime.client_secrets.create", "POST /v1/realtime/client_secrets", honoured={"expires_after", "session"}),
    Walk("alpha", "beta.realtime.sessions.create", "POST /v1/realtime/sessions",
         honoured={"client_secret", "input_audio_format", "input_audio_transcription", "instructions", "max_response_output_tokens", "modalities",
                   "model", "output_audio_format", "speed", "temperature", "tool_choice", "tools", "tracing", "turn_detection", "voice"},
         refused={"input_audio_noise_reduction": {"type": "near_field"}},
         args=lambda: {"model": "sim-chat"}),
    Walk("beta", "text_to_speech.convert", "POST /v1/text-to-speech/{voice_id}", TTS_HONOURED, TTS_REFUSED, args=tts_args),
    Walk("beta", "text_to_speech.stream", "POST /v1/text-to-speech/{voice_id}/stream", TTS_HONOURED, TTS_REFUSED, args=tts_args),
    Walk("beta", "text_to_speech.convert_with_timestamps", "POST /v1/text-to-speech/{voice_id}/with-timestamps", TTS_HONOURED, TTS_REFUSED, args=tts_args),
    Walk("beta", "text_to_speech.stream_with_timestamps", "POST /v1/text-to-speech/{voice_id}/stream/with-timestamps", TTS_HONOURED, TTS_REFUSED, args=tts_args),
    Walk("beta", "speech_to_speech.convert", "POST /v1/voice-changer/{voice_id}", STS_HONOURED, args=sts_args),
    Walk("beta", "speech_to_speech.stream", "POST /v1/voice-changer/{voice_id}/stream", STS_HONOURED, args=sts_args),
    Walk("beta", "speech_to_text.convert", "POST /v1/speech-to-text",
         honoured={"model_id", "file", "language_code", "timestamps_granularity", "temperature", "file_format",
                   "enable_logging",  # no history is kept
                   "token"},  # a single-use token in place of the key: authentication, not a request parameter
         refused={"diarize": True, "num_speakers": 2, "diarization_threshold": 0.3, "use_multi_channel": True, "webhook": True,
                  "cloud_storage_url": "https://example.com/a.wav", "additional_formats": [{"format": "srt"}],
                  # sim's transcription lists no stt_params: each is refused by name where the upstream does not take it
                  "secondary_language_codes": ["fra"], "numbers_format": "digits", "transcript_edit": True, "tag_audio_events": False,
                  "source_url": "https://example.com/a.wav", "webhook_id": "wh_1", "seed": 7, "multichannel_output_style": "merged",
                  "webhook_metadata": '{"a": 1}', "entity_detection": "all", "no_verbatim": True, "use_speaker_library": True,
                  "detect_speaker_roles": True, "entity_redaction": "all", "entity_redaction_mode": "redact", "keyterms": ["Tollgate"]},
         args=lambda: {"model_id": "scribe_v1", "file": ("a.wav", wav(), "audio/wav")}),
    Walk("beta", "voices.ivc.create", "POST /v1/voices/add", honoured={"name", "files", "description", "labels"},
         refused={"remove_background_noise": True},
         args=lambda: {"name": "Walk", "files": [("a.wav", wav(), "audio/wav")]}),
    Walk("beta", "voices.get_all", "GET /v1/voices", honoured={"show_legacy"}),
    Walk("beta", "voices.search", "GET /v2/voices",
         honoured={"next_page_token", "page_size", "search", "sort", "sort_direction", "voice_type", "category", "include_total_count"},
         refused={"fine_tuning_state": "fine_tuned", "collection_id": "col_1", "gender": "female", "age": "young", "language": "en", "accent": "british",
                  "use_cases": ["narration"], "min_notice_period_days": 7, "include_custom_rates": True, "include_live_moderated": True,
                  "high_quality": True, "voice_ids": [GEORGE]}),
    Walk("beta", "voices.get", "GET /v1/voices/{voice_id}", honoured={"voice_id"}, refused={"with_settings": True},
         args=lambda: {"voice_id": GEORGE}),
]


def method_of(client: Any, dotted: str) -> Callable[..., Any]:
    for part in dotted.split("."):
        client = getattr(client, part)
    return client


def client_parameters(family: str, dotted: str) -> set[str]:
    client = openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9") if family == "alpha" else ElevenLabs(api_key="x", base_url="http://127.0.0.1:9")
    return {p for p in inspect.signature(method_of(client, dotted)).parameters if p not in NOT_PARAMETERS}


@pytest.mark.parametrize("walk", WALKS, ids=[w.method for w in WALKS])
def test_every_parameter_the_client_can_send_is_known_as_honoured_or_refused(walk: Walk):
    params = client_parameters(walk.family, walk.method)
    known = walk.honoured | set(walk.refused)
    assert not params - known, f"{walk.route}: the client's {walk.method} sends parameters Tollgate does not know: {sorted(params - known)}"
    assert not known - params, f"{walk.route}: the table lists parameters {walk.method} no longer has: {sorted(known - params)}"


def refusal(gateway: Gateway, key: str, walk: Walk, param: str, value: Any) -> tuple[int, str | None]:
    """Calls the route through the client with `param` asking for something: the status and the parameter the error names."""
    kwargs = {**walk.args(), param: value}
    try:
        if walk.family == "alpha":
            result = method_of(gateway.client(key), walk.method)(**kwargs)
        else:
            result = method_of(ElevenLabs(api_key=key, base_url=gateway.url + "/beta", timeout=30), walk.method)(**kwargs)
            if inspect.isgenerator(result):
                b"".join(result) if "timestamps" not in walk.method else list(result)
        return 200, None
    except openai.APIStatusError as err:
        return err.status_code, (err.body or {}).get("param") if isinstance(err.body, dict) else None
    except ApiError as err:
        body = err.body if isinstance(err.body, dict) else json.loads(err.body or "{}")
        return err.status_code or 0, (body.get("error") or {}).get("param")


def refused_cases(kind: str) -> list[Any]:
    cases = []
    for w in WALKS:
        for p, v in getattr(w, kind).items():
            cases.append(pytest.param(w, p, v, id=f"{w.method}-{p}"))
    return cases


@pytest.mark.parametrize(("walk", "param", "value"), refused_cases("refused"))
def test_a_parameter_the_gateway_cannot_honour_is_refused_by_name_and_bills_nothing(gateway, account, walk: Walk, param: str, value: Any):
    before = gateway.balance(account.key)
    status, named = refusal(gateway, account.key, walk, param, value)
    assert status == (400 if walk.family == "alpha" else 422), f"{walk.route} with {param}={value!r} answered {status}"
    # The error names the parameter, or a field inside it (`text.verbosity`), or the session field (`session.…`).
    assert named is not None and param in named.replace("[", ".").replace("]", "").split("."), f"the refusal names {named!r}, not {param}"
    gateway.assert_not_debited(account.key, before, settle_wait=0)


@pytest.mark.parametrize(("param", "value", "named"), [
    ("text", {"format": {"type": "text"}, "verbosity": "low"}, "text.verbosity"),
    ("reasoning", {"effort": "low", "summary": "auto"}, "reasoning.summary"),
    ("image", {"context_compression": "disabled"}, "image.context_compression"),
    ("access_programs", {"cyber": "daybreak_red"}, "access_programs.cyber"),
])
def test_a_field_of_an_honoured_responses_parameter_that_a_chat_model_cannot_honour_is_refused_by_its_path(gateway, account, client, param, value, named):
    before = gateway.balance(account.key)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="sim-chat", input="Hello.", max_output_tokens=16, **{param: value})
    assert err.value.body["param"] == named
    gateway.assert_not_debited(account.key, before, settle_wait=0)
    # Their defaults ask for nothing and pass.
    defaults = {"text": {"verbosity": "medium"}, "reasoning": {"summary": None}, "image": {"context_compression": "auto"}, "access_programs": {"cyber": "standard"}}
    assert client.responses.create(model="sim-chat", input="Hello.", max_output_tokens=16, **{param: defaults[param]}).output
