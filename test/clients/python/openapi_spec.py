"""The official OpenAI OpenAPI description (shared/specs/openai-openapi.yaml, never edited) as
jsonschema validators for response bodies.

Loading: the YAML is ~3 MB. It is parsed once per session (libyaml when PyYAML has it) and the parsed
form is cached as JSON in the virtualenv, keyed by the file's sha256, so later runs skip the YAML.

Two readings of the document are needed to validate with a JSON Schema 2020-12 validator, and both
are applied to the whole document before use (they only ever accept *more* null values):

1. `nullable: true`. The file says `openapi: 3.1.0` but still marks 111 schemas with the OpenAPI 3.0
   keyword `nullable: true`, which JSON Schema 2020-12 ignores. Read literally, every streamed chat
   chunk would be invalid (`finish_reason: null`, `logprobs: null`, `usage: null` are all
   `nullable: true` there, and OpenAI itself sends them). We read the keyword as its authors meant:
   `{..., nullable: true}` becomes `{anyOf: [{...}, {type: "null"}]}`.
2. `Response.user` and `Response.usage`. The schema types `user` (ModelResponseProperties) as a plain
   string and `usage` as a ResponseUsage object, neither nullable; yet the Response examples in the
   same file show `"user": null` everywhere, and `"usage": null` in every in-progress Response (the
   `response.created` event example, and the streamed examples of `POST /responses`); the official
   clients type both as optional. We accept null for exactly these two properties. (A completed
   Response must still carry a full ResponseUsage, which the behaviour tests check too.)

YAML's timestamp resolver is switched off so that strings such as `2024-08-06` stay strings, exactly
as they would in the JSON rendering of the same spec.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import sys
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

URI = "urn:tollgate-test:openai-openapi"


def _yaml_loader() -> type:
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    return Loader


def _cache_dir() -> Path | None:
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix):  # running inside a virtualenv
        return Path(sys.prefix)
    return None


def load_document(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()[:20]
    cache_dir = _cache_dir()
    cache = cache_dir / f"openai-openapi.{digest}.json" if cache_dir else None
    if cache and cache.exists():
        try:
            return json.loads(cache.read_text("utf-8"))
        except ValueError:
            pass
    doc = yaml.load(raw, Loader=_yaml_loader())  # noqa: S506 - a safe loader subclass
    if cache:
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc), "utf-8")
        tmp.replace(cache)
    return doc


def _nullable_to_any_of(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _nullable_to_any_of(v) for k, v in node.items()}
        if out.pop("nullable", None) is True:
            return {"anyOf": [out, {"type": "null"}]}
        return out
    if isinstance(node, list):
        return [_nullable_to_any_of(v) for v in node]
    return node


def _allow_null(properties: dict[str, Any], name: str) -> None:
    properties[name] = {"anyOf": [properties[name], {"type": "null"}]}


class OpenAISpec:
    def __init__(self, path: Path) -> None:
        if not path.exists():
            raise FileNotFoundError(
                f"the official OpenAI spec is missing at {path} (it lives in shared/specs/ beside the repo)"
            )
        doc = _nullable_to_any_of(load_document(path))
        schemas = doc["components"]["schemas"]
        _allow_null(schemas["ModelResponseProperties"]["properties"], "user")
        _allow_null(next(p for p in schemas["Response"]["allOf"] if "usage" in p.get("properties", {}))["properties"],
                    "usage")
        self.schemas = schemas
        self.registry = Registry().with_resource(URI, DRAFT202012.create_resource(doc))
        self._validators: dict[str, Draft202012Validator] = {}
        # Streamed Responses events: event `type` -> the schema the spec gives that event.
        self.response_event_schemas: dict[str, str] = {}
        for ref in schemas["ResponseStreamEvent"]["anyOf"]:
            name = ref["$ref"].rsplit("/", 1)[-1]
            prop = schemas[name].get("properties", {}).get("type", {})
            for value in prop.get("enum", []) + ([prop["const"]] if "const" in prop else []):
                self.response_event_schemas[value] = name

    def validator(self, name: str) -> Draft202012Validator:
        if name not in self.schemas:
            raise KeyError(f"no schema named {name} in the OpenAI spec")
        if name not in self._validators:
            self._validators[name] = Draft202012Validator(
                {"$ref": f"{URI}#/components/schemas/{name}"}, registry=self.registry
            )
        return self._validators[name]

    def assert_valid(self, name: str, instance: Any) -> None:
        errors = sorted(self.validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
        if errors:
            lines = [f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {_short(e)}" for e in errors[:12]]
            raise AssertionError(
                f"body does not match the OpenAI spec's {name}:\n" + "\n".join(lines)
                + f"\nbody: {json.dumps(instance)[:1500]}"
            )

    def assert_valid_response_event(self, event: dict[str, Any]) -> None:
        name = self.response_event_schemas.get(event.get("type"))
        if name is None:
            raise AssertionError(f"the OpenAI spec has no Responses stream event of type {event.get('type')!r}")
        self.assert_valid(name, event)


def _short(error: Any) -> str:
    if error.context:  # anyOf/oneOf: the most specific reason is deeper
        best = min(error.context, key=lambda e: len(e.message))
        return f"{error.validator} failed; e.g. at {'/'.join(map(str, best.absolute_path)) or '(here)'}: {best.message[:300]}"
    return error.message[:300]


def decode_base64_embedding(value: str) -> list[float]:
    raw = base64.b64decode(value, validate=True)
    if len(raw) % 4:
        raise AssertionError(f"base64 embedding is {len(raw)} bytes, not a whole number of float32s")
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))
