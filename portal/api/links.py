"""OpenAPI links from each create operation to the operations on what it created (drf-spectacular hook).

``POST /api/requests/`` answers a request with its ``id``; ``/api/requests/{id}/approve/`` and the other operations
under ``/api/requests/{id}/`` take that id. The hook writes that down as OpenAPI links on the create's success
answer, derived from the paths and the answer's fields (nothing listed by hand, so a new action is linked at once).
Clients and generators may follow them; the schema fuzz test's stateful run (schemathesis) chains calls along them,
which its own inference misses for actions such as approve.
"""

from __future__ import annotations

import re
from typing import Any

_METHODS = ("get", "put", "post", "delete", "patch")
_PARAM = re.compile(r"\{(\w+)\}")


def _fields(result: dict[str, Any], content: dict[str, Any]) -> set[str]:
    """The properties of a JSON answer whose schema is a component (empty when it is anything else)."""
    ref = content.get("application/json", {}).get("schema", {}).get("$ref", "")
    name = ref.rsplit("/", 1)[-1]
    return set(result.get("components", {}).get("schemas", {}).get(name, {}).get("properties", {}))


def _field_for(param: str, fields: set[str]) -> str | None:
    """Which field of the created object fills ``{param}``: the same name, else its ``name`` for a name-like key."""
    if param in fields:
        return param
    if param in ("pk", "id") and "id" in fields:
        return "id"
    if param in ("name", "cluster") and "name" in fields:
        return "name"
    return None


def document_links(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular hook: each ``POST /api/<things>/`` links to every operation on ``/api/<things>/{key}/...``."""
    paths: dict[str, Any] = result.get("paths", {})
    for path, item in paths.items():
        create = item.get("post")
        if create is None or not path.startswith("/api/") or _PARAM.search(path):
            continue
        for status_code in ("201", "202", "200"):
            answer = create.get("responses", {}).get(status_code)
            if answer is not None:
                break
        else:
            continue
        fields = _fields(result, answer.get("content", {}))
        links: dict[str, Any] = {}
        for target_path, target in paths.items():
            rest = target_path[len(path):] if target_path.startswith(path) else ""
            match = re.match(r"\{(\w+)\}/", rest)
            if match is None or len(_PARAM.findall(rest)) != 1:
                continue
            field = _field_for(match.group(1), fields)
            if field is None:
                continue
            for method, operation in target.items():
                if method in _METHODS and "operationId" in operation:
                    links[operation["operationId"]] = {
                        "operationId": operation["operationId"],
                        "parameters": {match.group(1): f"$response.body#/{field}"},
                    }
        if links:
            answer["links"] = links
    return result
