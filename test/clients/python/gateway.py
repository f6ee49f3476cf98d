"""A real `tollgate serve` on its embedded default (PGlite in a fresh temp dir, simulated upstream,
port 0), the operator CLI against the same store, and exact nanodollar billing checks."""
from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import openai

REPO = Path(__file__).resolve().parents[3]
# TOLLGATE_CLI points the suites at another build of the same CLI (default: this checkout's dist/).
CLI = Path(os.environ.get("TOLLGATE_CLI") or REPO / "dist" / "cli.js")
NODE = shutil.which("node") or "node"

NANO = Decimal(1_000_000_000)
# $ per 1M tokens as integer nanodollars per 1M tokens: (input, output).
PRICES = {
    "sim-chat": (300_000_000, 2_500_000_000),
    "tollgate-27b": (300_000_000, 2_500_000_000),
    "sim-reasoner": (300_000_000, 2_500_000_000),
    "sim-embed": (20_000_000, 0),
    "gemma-3-27b-it": (300_000_000, 2_500_000_000),
    "bge-m3": (20_000_000, 0),
}


def cost_nano(model: str, input_tokens: int, output_tokens: int = 0) -> int:
    """What the gateway must debit: one ceil over the whole request, in integer nanodollars."""
    per_in, per_out = PRICES[model]
    num = input_tokens * per_in + output_tokens * per_out
    return -(-num // 1_000_000)


def embedded_models() -> list[dict[str, Any]]:
    """The embedded default's models as configured (its source, dist/config.js), to check published prices against."""
    script = f"import({json.dumps((CLI.parent / 'config.js').as_uri())}).then((m) => console.log(JSON.stringify(m.EMBEDDED_DEFAULT.models)))"
    out = subprocess.run([NODE, "--input-type=module", "-e", script], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def published_matches_config(model: dict[str, Any], pricing: dict[str, Any]) -> None:
    """Every configured non-zero unit price appears in `pricing` as the same decimal-dollar amount (compared exactly)."""
    assert pricing["currency"] == "usd"
    for field, value in model.items():
        if not field.endswith(("_per_mtok", "per_mchar", "_per_minute", "_per_second")):
            continue
        want = Decimal(str(value))
        if field.endswith("_per_second"):
            field, want = field.replace("_per_second", "_per_minute"), want * 60
        if want == 0 and field not in pricing:
            continue
        assert isinstance(pricing[field], str), (model["id"], field)
        assert Decimal(pricing[field]) == want, (model["id"], field, pricing[field], value)


@dataclass
class Account:
    account_id: str
    key: str
    prefix: str


# Models offered under other names than the ones `sim` serves them by (as the example config's gemma and
# bge-m3 are), and an alias: replies must name the id the client asked for, or the alias's model's id.
RENAMED_MODELS = [
    {"id": "gemma-3-27b-it", "upstream": "sim", "upstream_model": "sim-chat", "aliases": ["gemma-27b"], "kind": "chat",
     "input_per_mtok": "0.30", "output_per_mtok": "2.50", "max_output_tokens": 4096},
    {"id": "bge-m3", "upstream": "sim", "upstream_model": "sim-embed", "kind": "embedding",
     "input_per_mtok": "0.02", "max_output_tokens": 1},
]


class Gateway:
    def __init__(self, models: list[dict[str, Any]] | None = None, upstreams: dict[str, Any] | None = None) -> None:
        """The embedded default; or, given `models`, a config file serving them from in-process `sim`s
        (`upstreams`, by default one named `sim`)."""
        self.data_dir = tempfile.mkdtemp(prefix="tollgate-pyclient-")
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.output: list[str] = []
        self.config_args: list[str] = []
        if models is not None:
            path = Path(self.data_dir) / "config.json"
            path.write_text(json.dumps({
                "upstreams": upstreams or {"sim": {"sim": {}}}, "models": models,
                "payments": {"provider": "sandbox", "allow_sandbox": True},
            }))
            self.config_args = ["--config", str(path)]

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "Gateway":
        if not CLI.exists():
            raise RuntimeError(f"{CLI} is missing: build the gateway first (npm run build)")
        env = {**os.environ, "TOLLGATE_LOG_REQUESTS": "0"}
        self.proc = subprocess.Popen(
            [NODE, str(CLI), "serve", "--data-dir", self.data_dir, "--listen", "127.0.0.1:0", *self.config_args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env,
        )
        found: queue.Queue[str] = queue.Queue()

        def drain() -> None:  # keeps the pipe from filling up for the whole session
            assert self.proc and self.proc.stdout
            for line in self.proc.stdout:
                self.output.append(line)
                if line.startswith("{"):
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if entry.get("msg") == "listening":
                        found.put(entry["base_url"])
            found.put("")  # the process closed its output: it exited

        threading.Thread(target=drain, daemon=True).start()
        try:
            self.url = found.get(timeout=60)
        except queue.Empty:
            self.url = ""
        if not self.url:
            self.stop()
            raise RuntimeError("the gateway did not start:\n" + "".join(self.output))
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    # ---- operator CLI ----------------------------------------------------------------------------
    def cli(self, *args: str) -> dict[str, Any]:
        done = subprocess.run(
            [NODE, str(CLI), *args, "--json", "--data-dir", self.data_dir, *self.config_args],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tollgate {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        return json.loads(done.stdout)

    def account(self, credit: str = "5", *, scopes: str | None = None, rpm: int | None = None,
                concurrency: int | None = None, spend_limit: str | None = None,
                period: str = "monthly") -> Account:
        acct = self.cli("account", "create", "--email", f"py-{secrets.token_hex(5)}@example.com",
                        "--credit", credit)
        args = ["key", "create", "--account", acct["account_id"]]
        if scopes:
            args += ["--scopes", scopes]
        if rpm is not None:
            args += ["--rpm", str(rpm)]
        if concurrency is not None:
            args += ["--concurrency", str(concurrency)]
        if spend_limit is not None:
            args += ["--spend-limit", spend_limit, "--period", period]
        key = self.cli(*args)
        return Account(acct["account_id"], key["key"], key["prefix"])

    # ---- clients ---------------------------------------------------------------------------------
    def client(self, key: str, base: str = "/v1") -> openai.OpenAI:
        return openai.OpenAI(api_key=key, base_url=self.url + base, max_retries=0, timeout=30)

    def http(self, method: str, path: str, key: str | None = None,
             body: dict[str, Any] | None = None) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
        if key:
            req.add_header("Authorization", f"Bearer {key}")
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                return res.status, {k.lower(): v for k, v in res.headers.items()}, res.read()
        except urllib.error.HTTPError as err:
            return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()

    def key_info(self, key: str) -> dict[str, Any]:
        """GET /svc/v1/key with dollars read as exact Decimals."""
        status, _, body = self.http("GET", "/svc/v1/key", key)
        assert status == 200, f"GET /svc/v1/key answered {status}: {body[:300]!r}"
        return json.loads(body, parse_float=Decimal, parse_int=Decimal)

    def balance(self, key: str) -> Decimal:
        return self.key_info(key)["balance"]

    @staticmethod
    def dollars(nano: int) -> Decimal:
        return Decimal(nano) / NANO

    def settled_balance(self, key: str, before: Decimal, timeout: float = 5.0) -> Decimal:
        """The balance once it has moved away from `before` (streams settle just after their last byte)."""
        deadline = time.monotonic() + timeout
        after = self.balance(key)
        while after == before and time.monotonic() < deadline:
            time.sleep(0.05)
            after = self.balance(key)
        return after

    def assert_debited(self, key: str, before: Decimal, nano: int) -> None:
        """The balance moved by exactly `nano` nanodollars."""
        assert nano > 0
        after = self.settled_balance(key, before)
        moved = before - after
        assert moved == self.dollars(nano), (
            f"balance moved by ${moved} (from {before} to {after}); price x usage is ${self.dollars(nano)}"
        )

    def assert_not_debited(self, key: str, before: Decimal, settle_wait: float = 0.3) -> None:
        time.sleep(settle_wait)
        after = self.balance(key)
        assert after == before, f"a refused request moved the balance from {before} to {after}"


def sse_data(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The JSON payloads of an SSE body, in order, stopping at `data: [DONE]`."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}

HELLO = [{"role": "user", "content": "Say hello to the gateway."}]
