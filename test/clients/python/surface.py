"""The surface the official Python clients cover, read from the installed packages themselves: every HTTP
method and path template their resource classes (openai) and raw clients (elevenlabs) call, for each group
Tollgate covers. Nothing is listed by hand: a new client release that adds a route adds it here."""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass

import elevenlabs
import openai

# The groups Tollgate covers, as the packages' folders (or modules) name them.
ALPHA_GROUPS = ["chat", "completions", "responses", "embeddings", "audio", "files", "batches", "models", "realtime", "beta/realtime"]
BETA_GROUPS = ["text_to_speech", "speech_to_speech", "speech_to_text", "voices", "samples", "models", "user"]

_OPENAI_VERBS = {"_get": "GET", "_get_api_list": "GET", "_post": "POST", "_delete": "DELETE", "_patch": "PATCH", "_put": "PUT"}


@dataclass(frozen=True, order=True)
class ClientRoute:
    method: str
    path: str  # a template under the family's base URL, `{name}` for a path parameter: `/v1/files/{file_id}`
    source: str  # the package file that calls it

    @property
    def key(self) -> tuple[str, str]:
        return (self.method, self.path)


def _template(node: ast.AST) -> str | None:
    """A path argument as a `{name}` template: a literal, an f-string, or openai's `path_template("...", ...)`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = ""
        for part in node.values:
            if isinstance(part, ast.Constant):
                out += str(part.value)
            else:
                expr = part.value  # type: ignore[attr-defined]
                if isinstance(expr, ast.Call) and expr.args:  # jsonable_encoder(voice_id)
                    expr = expr.args[0]
                out += "{" + (expr.id if isinstance(expr, ast.Name) else ast.unparse(expr)) + "}"
        return out
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "path_template" and node.args:
        return _template(node.args[0])
    return None


def _py_files(root: str, group: str, only: str | None = None) -> list[str]:
    base = os.path.join(root, group)
    if os.path.exists(base + ".py"):
        return [base + ".py"]
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(base) for f in fs
                  if f.endswith(".py") and (only is None or f == only))


def openai_routes() -> list[ClientRoute]:
    root = os.path.join(os.path.dirname(openai.__file__), "resources")
    found: set[ClientRoute] = set()
    for group in ALPHA_GROUPS:
        for f in _py_files(root, group):
            for n in ast.walk(ast.parse(open(f).read())):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _OPENAI_VERBS and n.args:
                    path = _template(n.args[0])
                    if path:
                        found.add(ClientRoute(_OPENAI_VERBS[n.func.attr], "/v1" + path, os.path.relpath(f, root)))
    return sorted(found)


def elevenlabs_routes() -> list[ClientRoute]:
    root = os.path.dirname(elevenlabs.__file__)
    found: set[ClientRoute] = set()
    for group in BETA_GROUPS:
        for f in _py_files(root, group, only="raw_client.py"):
            for n in ast.walk(ast.parse(open(f).read())):
                if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("request", "stream") and n.args):
                    continue
                method = [k.value.value for k in n.keywords if k.arg == "method" and isinstance(k.value, ast.Constant)]
                path = _template(n.args[0])
                if path and method:
                    found.add(ClientRoute(str(method[0]), "/" + path, os.path.relpath(f, root)))
    return sorted(found)
