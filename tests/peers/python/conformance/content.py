"""Fixed payloads served by the conformance fixture."""

import json

# A 1x1 red PNG and a minimal (silent) WAV file, base64-encoded.
PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

SIMPLE_TEXT = "This is a simple text response for testing."
STATIC_TEXT = "This is the content of the static text resource."
WATCHED_TEXT = "Watched resource content"
MIXED_JSON = json.dumps({"test": "data", "value": 123})

# inputSchema of json_schema_2020_12_tool: draft 2020-12 keywords ($schema, $defs, $anchor,
# $ref, allOf/anyOf, if/then/else, additionalProperties) that an SDK or proxy must not strip.
JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

# Elicitation form schemas.
RESPONSE_SCHEMA = {
    "type": "object",
    "properties": {"response": {"type": "string", "description": "User's response"}},
    "required": ["response"],
}

# SEP-1034: a default for every primitive type.
DEFAULTS_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    "required": [],
}


def _titled(prefix: str) -> list[dict[str, str]]:
    names = ["First", "Second", "Third"]
    return [{"const": f"value{i + 1}", "title": f"{names[i]} {prefix}"} for i in range(3)]


# SEP-1330: the five enum shapes (untitled/titled single-select, legacy enumNames,
# untitled/titled multi-select).
ENUMS_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {
            "type": "string",
            "description": "Select one option",
            "enum": ["option1", "option2", "option3"],
        },
        "titledSingle": {
            "type": "string",
            "description": "Select one option with titles",
            "oneOf": _titled("Option"),
        },
        "legacyEnum": {
            "type": "string",
            "description": "Select one option (legacy)",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "description": "Select multiple options",
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "description": "Select multiple options with titles",
            "minItems": 1,
            "maxItems": 3,
            "items": {"anyOf": _titled("Choice")},
        },
    },
    "required": [],
}


def string_form(field: str) -> dict:
    """A one-field form asking for a required string."""
    return {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}


CONFIRM_FORM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}

# Completion candidates, filtered by the typed prefix.
COMPLETIONS = {
    "arg1": ["paris", "park", "party", "peace", "piano"],
    "arg2": ["alpha", "beta", "gamma"],
    "id": ["1", "2", "3", "123"],
}
