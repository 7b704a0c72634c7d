"""What a constrained call's output must be: `StructuredOutput`, independent of the library
that enforces it (`engine.structured.compiler`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_SCHEMA_CHARS = 64 * 1024  # a JSON Schema's text
ANY_OBJECT = '{"type": "object"}'  # OpenAI's json_object: any JSON object


@dataclass(frozen=True)
class StructuredOutput:
    """The output is one JSON value matching `json_schema` (a JSON Schema as JSON text),
    then the end of the call. The JSON is compact (no whitespace between its tokens), so a
    weak model cannot loop in whitespace. Frozen and hashable: compiled grammars are cached
    by it. ValueError naming the field for text that is too long or not a JSON Schema
    object (a schema the library cannot compile fails later, at compile time)."""

    json_schema: str = ANY_OBJECT

    def __post_init__(self) -> None:
        if not isinstance(self.json_schema, str) or len(self.json_schema) > MAX_SCHEMA_CHARS:
            raise ValueError(f"json_schema: must be JSON text of at most {MAX_SCHEMA_CHARS} "
                             f"characters")
        try:
            schema = json.loads(self.json_schema)
        except ValueError as exc:
            raise ValueError(f"json_schema: not valid JSON ({exc})") from None
        if not isinstance(schema, dict):
            raise ValueError("json_schema: must be a JSON object (a JSON Schema)")
