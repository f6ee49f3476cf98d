"""The ElevenLabs OpenAPI description (shared/specs/elevenlabs-openapi.json, never edited) as jsonschema
validators for response bodies. The file is OpenAPI 3.1, whose schemas are JSON Schema 2020-12 as they
stand (nullables are written `anyOf: [..., {type: null}]`), so no reading of the document is needed."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

URI = "urn:tollgate-test:elevenlabs-openapi"


class ElevenLabsSpec:
    def __init__(self, path: Path) -> None:
        self.doc = json.loads(path.read_text())
        self.registry = Registry().with_resource(URI, Resource(contents=self.doc, specification=DRAFT202012))
        self._validators: dict[str, Draft202012Validator] = {}

    def validator(self, schema: str) -> Draft202012Validator:
        v = self._validators.get(schema)
        if v is None:
            assert schema in self.doc["components"]["schemas"], f"no schema {schema} in the spec"
            v = Draft202012Validator({"$ref": f"{URI}#/components/schemas/{schema}"}, registry=self.registry)
            self._validators[schema] = v
        return v

    def assert_valid(self, schema: str, body: Any) -> None:
        errors = sorted(self.validator(schema).iter_errors(body), key=lambda e: list(e.path))
        assert not errors, f"{schema}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])

    def assert_valid_array(self, schema: str, body: Any) -> None:
        assert isinstance(body, list), f"expected a JSON array of {schema}, got {type(body).__name__}"
        for item in body:
            self.assert_valid(schema, item)
