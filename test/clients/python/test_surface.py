"""The surface sweep: every route the official Python clients call in a group Tollgate covers (read from the
installed packages by surface.py) is called with a minimal request against a real gateway. None may answer
the generic "no route" 404, a 405 or a 5xx: each is served (whatever it says of the minimal request), or
refused on purpose with 404 `not_offered` in the family's envelope. docs/compatibility.md lists every one
of these routes with its state, and must agree with what the gateway answered."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

import pytest

from gateway import REPO, Gateway
from surface import ClientRoute, elevenlabs_routes, openai_routes

GEORGE = "JBFqnCBsd6RMkjVDRZzb"  # a premade voice
# What a path parameter is filled with: a real id where one exists without creating anything.
PATH_VALUES = {"model": "sim-chat", "voice_id": GEORGE}
FAMILIES = {"alpha": ("", openai_routes), "beta": ("/beta", elevenlabs_routes)}
COMPATIBILITY = REPO / "docs" / "compatibility.md"


def call(gateway: Gateway, key: str, base: str, route: ClientRoute) -> tuple[int, dict[str, Any]]:
    path = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES.get(m.group(1), f"sweep-{m.group(1)}"), route.path)
    data = b"{}" if route.method in ("POST", "PATCH", "PUT") else None
    req = urllib.request.Request(gateway.url + base + path, method=route.method, data=data)
    req.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            status, body = res.status, res.read()
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read()
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    return status, parsed if isinstance(parsed, dict) else {}


def sweep(gateway: Gateway, key: str, family: str) -> dict[tuple[str, str], str]:
    """Each client route of the family: `served` or `not offered`; generic 404s, 405s and 5xx are collected and fail."""
    base, routes = FAMILIES[family]
    states: dict[tuple[str, str], str] = {}
    wrong: list[str] = []
    for route in routes():
        status, body = call(gateway, key, base, route)
        error = body.get("error") if isinstance(body.get("error"), dict) else {}
        code, message = error.get("code"), str(error.get("message", ""))
        if status >= 500 or status == 405 or (status == 404 and code == "not_found" and message.startswith("No route")):
            wrong.append(f"{route.method} {base}{route.path} ({route.source}): {status} {message[:120]}")
        elif code == "not_offered":
            assert status == 404 and "not offered by this gateway" in message, (route, status, message)
            if family == "beta":  # ElevenLabs clients read `detail`: the same error there
                assert body["detail"]["status"] == "not_offered" and body["detail"]["message"] == message
            states[route.key] = "not offered"
        else:
            states[route.key] = "served"
    assert not wrong, "routes the official client calls that the gateway does not answer on purpose:\n  " + "\n  ".join(wrong)
    return states


def documented(family: str) -> dict[tuple[str, str], str]:
    """The rows of docs/compatibility.md's route tables for a family that the Python client calls: (method, path) -> state."""
    base = FAMILIES[family][0]
    rows: dict[tuple[str, str], str] = {}
    for line in COMPATIBILITY.read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[0] not in ("GET", "POST", "DELETE", "PATCH", "PUT"):
            continue
        if "python" not in [c.strip() for c in cells[3].split(",")]:
            continue
        path = cells[1]
        if family == "beta" and path.startswith("/beta/"):
            rows[(cells[0], path[len("/beta"):])] = cells[2]
        elif family == "alpha" and path.startswith("/v1/") and not base:
            rows[(cells[0], path)] = cells[2]
    return rows


@pytest.mark.parametrize("family", ["alpha", "beta"])
def test_every_route_the_client_calls_is_served_or_refused_as_not_offered_and_the_compatibility_table_says_which(gateway, account, family):
    states = sweep(gateway, account.key, family)
    table = documented(family)
    missing = sorted(set(states) - set(table))
    stale = sorted(set(table) - set(states))
    assert not missing, f"docs/compatibility.md lacks these {family} routes the client calls: {missing}"
    assert not stale, f"docs/compatibility.md lists {family} routes the client no longer calls: {stale}"
    for route, state in states.items():
        doc = table[route]
        assert doc in ("supported", "limited", "not offered"), f"{route}: unknown state {doc!r}"
        assert (doc == "not offered") == (state == "not offered"), f"{route}: the table says {doc!r}, the gateway answered as {state}"


def test_a_not_offered_route_needs_a_key_like_any_other(gateway):
    status, body = call(gateway, "svc_live_" + "x" * 40, "/beta", ClientRoute("GET", "/v1/shared-voices", "-"))
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
