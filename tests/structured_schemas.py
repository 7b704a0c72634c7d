"""JSON Schemas the structured-output door tests share: two function tools' arguments
(`pick`: an enum and a bounded integer; `flag`: a boolean), each forcing a short output."""

PICK = {"type": "object",
        "properties": {"color": {"enum": ["red", "green"]},
                       "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["color", "n"], "additionalProperties": False}
FLAG = {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"],
        "additionalProperties": False}
SCHEMAS = {"pick": PICK, "flag": FLAG}
