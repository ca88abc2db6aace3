"""An OpenAPI component as a self-contained JSON Schema: what an MCP tool declares as its input."""
from __future__ import annotations

from typing import Any

COMPONENTS = "#/components/schemas/"


def schema_of(openapi: dict, name: str) -> dict:
    """Its components, however deep, under $defs."""
    components = openapi["components"]["schemas"]
    needed, pending = {}, [name]
    while pending:
        current = pending.pop()
        if current in needed:
            continue
        needed[current] = _local_refs(components[current])
        pending.extend(_referenced(components[current]))
    root = dict(needed.pop(name))
    if needed:
        root["$defs"] = needed
    return root


def _referenced(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"][len(COMPONENTS):]] if str(node.get("$ref", "")).startswith(COMPONENTS) else []
        return found + [name for value in node.values() for name in _referenced(value)]
    if isinstance(node, list):
        return [name for value in node for name in _referenced(value)]
    return []


def _local_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: ("#/$defs/" + value[len(COMPONENTS):] if key == "$ref" and value.startswith(COMPONENTS)
                      else _local_refs(value)) for key, value in node.items()}
    if isinstance(node, list):
        return [_local_refs(value) for value in node]
    return node
