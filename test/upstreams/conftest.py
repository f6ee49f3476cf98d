"""Fixtures: the real third-party servers (once per session) and a real `tollgate serve --config` in front
of them, with the operator CLI and exact nanodollar checks of test/clients/python/gateway.py."""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "clients" / "python"))

from gateway import Account, Gateway  # noqa: E402
from servers import WHISPER_MODEL, Server, llama_server, piper_server, whisper_server  # noqa: E402

# $ per 1M tokens as integer nanodollars per 1M tokens: (input, output).
PRICES = {"tiny-llama": (300_000_000, 2_500_000_000), "tiny-embed": (20_000_000, 0)}
# Speech: $15 per 1M characters = 15,000 nanodollars a character. Transcription: $0.006 a minute = 100 nanodollars a ms.
NANO_PER_CHAR, NANO_PER_MINUTE = 15_000, 6_000_000
MAX_OUTPUT = 2000
# What faster-whisper-server 0.0.3 does (docs/upstreams.md): the model in `model_name`, json and verbose_json only, no stream.
WHISPER_CAPS = {"model_field": "model_name", "response_formats": ["json", "verbose_json"], "stream": False}


def cost_nano(model: str, input_tokens: int, output_tokens: int = 0) -> int:
    per_in, per_out = PRICES[model]
    num = input_tokens * per_in + output_tokens * per_out
    return -(-num // 1_000_000)


class UpstreamGateway(Gateway):
    """`tollgate serve --config` whose upstreams are real servers (base_url), not `sim`."""

    def __init__(self, upstreams: dict[str, Any], models: list[dict[str, Any]]) -> None:
        super().__init__(models=models)
        path = Path(self.data_dir) / "config.json"
        path.write_text(json.dumps({
            "upstreams": upstreams, "models": models,
            "payments": {"provider": "sandbox", "allow_sandbox": True},
        }))


@pytest.fixture(scope="session")
def llama() -> Iterator[Server]:
    srv = llama_server()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def piper() -> Iterator[Server]:
    srv = piper_server()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def whisper() -> Iterator[Server]:
    srv = whisper_server()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def llama_gateway(llama: Server) -> Iterator[UpstreamGateway]:
    if llama.sigill:
        pytest.skip(llama.unavailable)
    if llama.unavailable:
        pytest.fail(llama.unavailable)
    gw = UpstreamGateway(
        {"llama": {"base_url": llama.url, "timeout_ms": 30000, "prompt_progress": True,
                   "usage_per_task": True}},
        [
            {"id": "tiny-llama", "upstream": "llama", "upstream_model": "tiny-llama.gguf", "kind": "chat",
             "input_per_mtok": "0.30", "output_per_mtok": "2.50", "max_output_tokens": MAX_OUTPUT},
            # Priced so a bill shows its prompt count: $1 per 1M input tokens is 1,000 nanodollars a token, and
            # up to 1,000 output tokens add exactly 1 nanodollar (rounded up).
            {"id": "tiny-llama-prompt", "upstream": "llama", "upstream_model": "tiny-llama.gguf", "kind": "chat",
             "input_per_mtok": "1", "output_per_mtok": "0.000001", "max_output_tokens": MAX_OUTPUT},
            {"id": "tiny-embed", "upstream": "llama", "upstream_model": "tiny-llama.gguf", "kind": "embedding",
             "input_per_mtok": "0.02", "max_output_tokens": 1},
        ],
    ).start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def account(llama_gateway: UpstreamGateway) -> Account:
    return llama_gateway.account("5")


@pytest.fixture
def client(llama_gateway: UpstreamGateway, account: Account) -> openai.OpenAI:
    return llama_gateway.client(account.key)


@pytest.fixture
def direct(llama: Server) -> openai.OpenAI:
    """The same llama-server called directly, without Tollgate: what it says on its own."""
    return openai.OpenAI(api_key="none", base_url=llama.url + "/v1", max_retries=0, timeout=30)


@pytest.fixture(scope="session")
def audio_gateway(piper: Server, whisper: Server) -> Iterator[UpstreamGateway]:
    for s in (piper, whisper):
        if s.unavailable:
            pytest.fail(s.unavailable)
    gw = UpstreamGateway(
        # Piper's server makes wav and pcm only, its pcm at the voice's 22.05 kHz (docs/upstreams.md)
        {"piper": {"base_url": piper.url, "timeout_ms": 60000, "speech_formats": ["wav", "pcm"], "speech_pcm_rate": 22050},
         "whisper": {"base_url": whisper.url, "timeout_ms": 120000, "transcription": WHISPER_CAPS}},
        [
            {"id": "piper-joe", "upstream": "piper", "upstream_model": "tts-1", "kind": "tts", "per_mchar": "15"},
            {"id": "whisper-base", "upstream": "whisper", "upstream_model": WHISPER_MODEL, "kind": "stt",
             "aliases": ["scribe_v1"], "audio_in_per_minute": "0.006"},
            # A name faster-whisper does not host: its own 400 reaches the client.
            {"id": "whisper-missing", "upstream": "whisper", "upstream_model": "no-such-model", "kind": "stt",
             "audio_in_per_minute": "0.006"},
        ],
    ).start()
    try:
        status, _, body = gw.http("POST", "/v1/audio/speech", None, {"model": "piper-joe", "input": "x", "voice": "alloy"})
        if status == 404 and b"not_found" in body and b"model" not in body:  # no such route (an unknown model would name it)
            pytest.skip("this build has no /v1/audio/speech route yet (the alpha audio routes are issue 13's, branch voice-alpha)")
        yield gw
    finally:
        gw.stop()
