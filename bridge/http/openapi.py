"""The OpenAPI 3.1 document of the HTTP door, served at ``/v1/openapi.json``.

Written by hand from the same names the validator uses (``V1_FIELDS``), so a test can check that the
document and the accepted fields never drift apart.
"""

from __future__ import annotations

from typing import Any

from bridge.core.door_formats import BODY_ENCODINGS
from bridge.core.validation import MAX_ID_LENGTH

_ID = {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH}

ENVELOPE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["body"],
    "properties": {
        "body": {"description": "Text, base64 text, or any JSON value (see body_encoding)."},
        "body_encoding": {"type": "string", "enum": list(BODY_ENCODINGS), "default": "text"},
        "content_type": {"type": "string"},
        "message_id": {**_ID, "description": "Assigned by the bridge when absent; re-posting is idempotent."},
        "session_id": {"type": "string", "maxLength": MAX_ID_LENGTH},
        "partition_key": {
            "type": "string",
            "maxLength": MAX_ID_LENGTH,
            "description": "Must equal session_id when both are set.",
        },
        "time_to_live": {"type": "number", "exclusiveMinimum": 0, "description": "Seconds."},
        "scheduled_enqueue_time_utc": {
            "type": "string",
            "format": "date-time",
            "description": "ISO-8601 with a UTC offset.",
        },
        "correlation_id": {"type": "string"},
        "subject": {"type": "string"},
        "reply_to": {"type": "string"},
        "to": {"type": "string"},
        "application_properties": {
            "type": "object",
            "additionalProperties": {"type": ["string", "number", "integer", "boolean"]},
        },
    },
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
        400: "Malformed JSON",
        401: "Missing or invalid credentials",
        403: "Key not allowed for the entity",
        404: "Unknown entity",
        413: "Too large",
        422: "A rule was broken; see code and field",
        503: "Outbox full or Redis unavailable; see Retry-After",
    }
    ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {str(status): {"description": reasons[status], **ref} for status in statuses}


_ENTITY_PARAM = {"name": "entity", "in": "path", "required": True, "schema": {"type": "string"}}
_SEND_ERRORS = _errors(400, 401, 403, 404, 413, 422, 503)


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
                                            "message_ids": {"type": "array", "items": {"type": "string"}}
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
                    "responses": {"200": {"description": "Depth"}},
                }
            },
            "/{entity}/messages": {
                "post": {
                    "summary": "Service Bus REST send (BrokerProperties header, custom property headers)",
                    "parameters": [_ENTITY_PARAM],
                    "responses": {"201": {"description": "Stored"}, **_errors(400, 401, 403, 413, 503)},
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
            {"name": "after", "in": "query", "schema": {"type": "string"}},
        ],
        "responses": {"200": {"description": "Entries, oldest first"}, **_errors(401, 403, 404)},
    }
