"""A msgspec Struct's JSON Schema as Litestar's OpenAPI `Schema`: the request bodies the server
decodes itself are published from the very Structs it decodes them with, so a field added to
one is in the document without a second description to keep in step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIType, Operation, RequestBody, Schema

_LITESTAR_NAMES = {"not": "schema_not", "if": "schema_if", "else": "schema_else"}
_NESTED_ONE = {"items", "schema_not", "additional_properties", "contains"}
_NESTED_LIST = {"one_of", "any_of", "all_of", "prefix_items"}


def struct_schema(struct: type[msgspec.Struct],
                  items: Mapping[str, tuple[type[msgspec.Struct], ...]] | None = None) -> Schema:
    """The Struct's schema, inline: Litestar rebuilds `components.schemas` from its own registry,
    so a component added beside it would be dropped and a reference to it would dangle. `items`: list
    fields whose items are one of several Structs, an untagged union msgspec's types cannot say."""
    items = items or {}
    alternatives = [one for ones in items.values() for one in ones]
    (ref, *refs), components = msgspec.json.schema_components([struct, *alternatives], ref_template="#/$defs/{name}")
    node = _inline(ref, components)
    by_type = dict(zip(alternatives, refs))
    for name, ones in items.items():
        node["properties"][name]["items"] = {"anyOf": [_inline(by_type[one], components) for one in ones]}
    return _to_schema(node)


def body_operation(struct: type[msgspec.Struct], answer: Schema | None = None) -> type[Operation]:
    """An operation class that publishes `struct` as its request body, for a route that decodes
    its body itself (strictly), where Litestar sees no `data` parameter to infer one from; and
    `answer`, where given, as its 200 answer in place of the one Litestar reads from the handler."""
    schema = struct_schema(struct)

    @dataclass
    class BodyOperation(Operation):
        def __post_init__(self) -> None:
            self.request_body = RequestBody(required=True,
                                            content={"application/json": OpenAPIMediaType(schema=schema)})
            if answer is not None and self.responses and "200" in self.responses:
                self.responses["200"].content = {"application/json": OpenAPIMediaType(schema=answer)}

    return BodyOperation


def _inline(node: Any, components: dict[str, dict]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline(components[node["$ref"].rsplit("/", 1)[1]], components)
        return {key: _inline(value, components) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(value, components) for value in node]
    return node


def _to_schema(node: dict[str, Any]) -> Schema:
    """JSON Schema's camelCase keys as Schema's fields; an unknown key raises (TypeError) rather than vanish."""
    fields: dict[str, Any] = {}
    for key, value in node.items():
        name = _LITESTAR_NAMES.get(key) or re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
        if name == "properties":
            value = {field: _to_schema(schema) for field, schema in value.items()}
        elif name in _NESTED_ONE and isinstance(value, dict):
            value = _to_schema(value)
        elif name in _NESTED_LIST:
            value = [_to_schema(schema) for schema in value]
        elif name == "type":
            value = [OpenAPIType(t) for t in value] if isinstance(value, list) else OpenAPIType(value)
        fields[name] = value
    return Schema(**fields)
