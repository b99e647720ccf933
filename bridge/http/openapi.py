"""The OpenAPI 3.1 document of the HTTP door, served at ``/v1/openapi.json``.

Written by hand from the same names the validator uses (``V1_FIELDS``), so a test can check that the
document and the accepted fields never drift apart.
"""

from __future__ import annotations

from typing import Any

from bridge.core.door_formats import BODY_ENCODINGS
from bridge.core.validation import (
    ENTITY_PATTERN,
    MAX_ENTITY_LENGTH,
    MAX_ID_LENGTH,
    MAX_TIME_TO_LIVE,
    RESERVED_ENTITIES,
)
from bridge.http.v1 import AFTER_PATTERN

_TEXT = {"type": ["string", "null"]}  # null is the same as absent, for every optional field
_ID = {"type": ["string", "null"], "maxLength": MAX_ID_LENGTH}
_BASE64 = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _encoding_is(name: str) -> dict[str, Any]:
    return {"properties": {"body_encoding": {"const": name}}, "required": ["body_encoding"]}


ENVELOPE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["body"],
    "properties": {
        "body": {"description": "Text, base64 text, or any JSON value (see body_encoding)."},
        "body_encoding": {"type": "string", "enum": list(BODY_ENCODINGS), "default": "text"},
        "content_type": _TEXT,
        "message_id": {
            **_ID,
            "minLength": 1,
            "description": "Assigned by the bridge when absent; re-posting is idempotent.",
        },
        "session_id": _ID,
        "partition_key": {**_ID, "description": "Must equal session_id when both are set."},
        "time_to_live": {
            "type": ["number", "null"],
            "exclusiveMinimum": 0,
            "maximum": MAX_TIME_TO_LIVE,
            "description": "Seconds.",
        },
        "scheduled_enqueue_time_utc": {
            "type": ["string", "null"],
            "format": "date-time",
            "description": "ISO-8601 with a UTC offset.",
        },
        "correlation_id": _TEXT,
        "subject": _TEXT,
        "reply_to": _TEXT,
        "reply_to_session_id": _ID,
        "via_partition_key": {**_ID, "description": "The transaction's partition key (send-via)."},
        "to": _TEXT,
        "application_properties": {
            "type": ["object", "null"],
            "propertyNames": {"minLength": 1},
            # JSON Schema cannot tell 1e20 (a double) from 100000000000000000000 (an integer beyond 64 bits,
            # refused with application_property_out_of_range), so the bound is in the description only.
            "additionalProperties": {
                "type": ["string", "boolean", "number"],
                "description": "An integer written without fraction or exponent must fit 64 bits.",
            },
        },
    },
    # body is text unless body_encoding is "json" (then any JSON value); base64 text must decode.
    "allOf": [
        {"if": _encoding_is("json"), "else": {"properties": {"body": {"type": "string"}}}},
        {"if": _encoding_is("base64"), "then": {"properties": {"body": {"pattern": _BASE64}}}},
    ],
    "description": (
        "Rules no schema can say are checked too (422 with a code): session_id equals partition_key when "
        "both are set, a session entity needs session_id, properties fit 64 KB and the whole message the "
        "entity's maximum size."
    ),
}

ERROR: dict[str, Any] = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": ["string", "null"]},
                "index": {"type": ["integer", "null"]},
            },
        }
    },
}


def _errors(*statuses: int) -> dict[str, Any]:
    reasons = {
        400: "Malformed JSON, text or body; the REST door: any broken rule",
        401: "Missing or invalid credentials",
        403: "Key not allowed for the entity",
        404: "Unknown entity",
        408: "The body did not arrive within ingress.body_read_timeout",
        413: "Too large",
        422: "A rule was broken (also an invalid entity path); see code and field",
        503: "Outbox full, Redis unavailable or durability not reached; see Retry-After",
    }
    ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {str(status): {"description": reasons[status], **ref} for status in statuses}


_SUBSCRIPTION = "(^|/)[Ss][Uu][Bb][Ss][Cc][Rr][Ii][Pp][Tt][Ii][Oo][Nn][Ss]/[^/]*$"
_ENTITY_PARAM = {
    "name": "entity",
    "in": "path",
    "required": True,
    "description": "Queue or topic path: letters, digits, '.', '-', '_', '/'; no '.' or '..' segment.",
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_ENTITY_LENGTH,
        "pattern": ENTITY_PATTERN,
        "not": {
            "anyOf": [
                {"pattern": r"(^|/)\.\.?/"},
                {"pattern": _SUBSCRIPTION},
                {"enum": sorted(RESERVED_ENTITIES)},
            ]
        },
    },
}
_DURABILITY = {
    "type": "string",
    "enum": ["local", "replicated"],
    "description": "The durability the acknowledgement reached (ingress.durability); also the"
    " Bridge-Durability header, with the replicas that confirmed",
}
_SEND_ERRORS = _errors(400, 401, 403, 404, 408, 413, 422, 503)


def document() -> dict[str, Any]:
    """The OpenAPI document."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "Service Bus bridge ingress", "version": "1"},
        "components": {
            "schemas": {"Envelope": ENVELOPE, "Error": ERROR},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
        "security": [{"bearer": []}, {"apiKey": []}, {}],
        "paths": {
            "/v1/entities/{entity}/messages": {
                "post": {
                    "summary": "Store one message durably",
                    "parameters": [_ENTITY_PARAM],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}
                        },
                    },
                    "responses": {
                        "202": {
                            "description": "Stored",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "properties": {
                                            "message_id": {"type": "string"},
                                            "entity": {"type": "string"},
                                            "duplicate": {"type": "boolean"},
                                            "durability": _DURABILITY,
                                        },
                                    }
                                }
                            },
                        },
                        **_SEND_ERRORS,
                    },
                }
            },
            "/v1/entities/{entity}/messages:batch": {
                "post": {
                    "summary": "Store several messages atomically (all or none)",
                    "parameters": [
                        _ENTITY_PARAM,
                        {
                            "name": "transactional",
                            "in": "query",
                            "schema": {"type": "boolean", "default": False},
                        },
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["messages"],
                                    "properties": {
                                        "messages": {
                                            "type": "array",
                                            "minItems": 1,
                                            "items": {"$ref": "#/components/schemas/Envelope"},
                                        }
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "202": {
                            "description": "Stored",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "properties": {
                                            "message_ids": {"type": "array", "items": {"type": "string"}},
                                            "entity": {"type": "string"},
                                            "duplicates": {"type": "integer"},
                                            "durability": _DURABILITY,
                                        },
                                    }
                                }
                            },
                        },
                        **_SEND_ERRORS,
                    },
                }
            },
            "/v1/entities/{entity}/quarantine": {"get": _listing("Entries that failed validation")},
            "/v1/entities/{entity}/deadletter": {"get": _listing("Messages dead-lettered locally")},
            "/v1/entities/{entity}/outbox": {
                "get": {
                    "summary": "Outbox depth",
                    "parameters": [_ENTITY_PARAM],
                    "responses": {"200": {"description": "Depth"}, **_errors(401, 403, 404, 422, 503)},
                }
            },
            "/{entity}/messages": {
                "post": {
                    "summary": "Service Bus REST send (BrokerProperties header, custom property headers)",
                    "parameters": [_ENTITY_PARAM],
                    "requestBody": {
                        "content": {
                            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                        }
                    },
                    "responses": {
                        "201": {"description": "Stored"},
                        **_errors(400, 401, 403, 404, 408, 413, 503),
                    },
                }
            },
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": {"description": "Alive"}}}},
            "/readyz": {
                "get": {
                    "summary": "Readiness (Redis answers)",
                    "responses": {"200": {"description": "Ready"}, "503": {"description": "Not"}},
                }
            },
        },
    }


def _listing(summary: str) -> dict[str, Any]:
    return {
        "summary": summary,
        "parameters": [
            _ENTITY_PARAM,
            {"name": "count", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
            {
                "name": "after",
                "in": "query",
                "description": "List entries after this entry id ('-': from the start).",
                "schema": {"type": "string", "pattern": AFTER_PATTERN},
            },
        ],
        "responses": {
            "200": {"description": "Entries, oldest first"},
            **_errors(401, 403, 404, 422, 503),
        },
    }
