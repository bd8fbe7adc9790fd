"""EDN on the mediator API, for the Clojure Jepsen bridge (jepsen-bridge/).

A request whose `Content-Type` is `application/edn` has an EDN map for a body; a request
that sends EDN or asks for it (`Accept: application/edn`) gets an EDN answer. Every route
and every check is the JSON API's: this module only translates at the edge.

Translation, both ways: map keys are keywords with hyphens in EDN (`:start-ns`) and
strings with underscores in JSON (`"start_ns"`). Keyword values arrive as plain strings
(`:type :invoke` checks like `"type": "invoke"`); EDN vectors and lists are lists. A set,
a non-keyword map key or a tagged literal has no JSON twin and is refused. Answers
carry strings as strings, never as keywords, so Clojure sees exactly what JSON would say.

What JSON's parser refuses is refused here too: forms nested deeper than MAX_DEPTH, and
strings that are not Unicode text (a lone surrogate from a `\ud800` escape could not be
written to the recording or into an answer).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mallory.history.edn import EdnError, Keyword, dumps, loads

EDN_TYPE = "application/edn"
MAX_DEPTH = 64  # nested maps and vectors; a request body of the API has 3 levels
_KEYWORD_NAME = re.compile(r"[A-Za-z*+!?<>=_-][A-Za-z0-9*+!?<>=_./-]*\Z")


class EdnBodyError(ValueError):
    """An EDN body the API cannot take; the message says what is wrong and where."""


def is_edn(content_type: str | None) -> bool:
    return bool(content_type) and content_type.split(";")[0].strip().lower() == EDN_TYPE


def parse_body(raw: bytes) -> dict[str, Any]:
    """An EDN request body as the dict the JSON API would have decoded."""
    try:
        form = loads(raw.decode("utf-8"), source="request body")
    except UnicodeDecodeError as exc:
        raise EdnBodyError(f"body is not UTF-8: {exc}") from None
    except EdnError as exc:
        raise EdnBodyError(f"body is not EDN: {exc}") from None
    if not isinstance(form, dict):
        raise EdnBodyError(f"body must be an EDN map, got {_edn_kind(form)}")
    return _from_edn(form, "body", 0)


def _edn_kind(form: Any) -> str:
    if isinstance(form, Keyword):
        return "a keyword"
    if isinstance(form, (set, frozenset)):
        return "a set"
    if isinstance(form, list):
        return "a vector"
    return type(form).__name__


def _from_edn(form: Any, where: str, depth: int) -> Any:
    if depth > MAX_DEPTH and isinstance(form, (dict, list)):
        raise EdnBodyError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(form, dict):
        out: dict[str, Any] = {}
        for key, value in form.items():
            if not isinstance(key, Keyword):
                raise EdnBodyError(f"{where}: map keys must be keywords, got {key!r}"[:200])
            name = _text(str.__str__(key), where)
            out[name.replace("-", "_")] = _from_edn(value, f"{where} :{name}"[:200], depth + 1)
        return out
    if isinstance(form, list):
        return [_from_edn(item, f"{where}[{i}]"[:200], depth + 1) for i, item in enumerate(form)]
    if isinstance(form, str):
        return _text(str.__str__(form), where)
    if isinstance(form, (frozenset, tuple)):
        raise EdnBodyError(f"{where}: {_edn_kind(form)} has no JSON equivalent; use a vector")
    return form


def _text(value: str, where: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise EdnBodyError(f"{where}: a string that is not Unicode text (a lone surrogate escape?)") from None
    return value


def render(payload: Any) -> bytes:
    """An API answer (JSON-shaped: dicts, lists, str, numbers, bool, None) as EDN text."""
    return dumps(_to_edn(payload)).encode("utf-8")


def _to_edn(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {_key(k): _to_edn(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_edn(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_to_edn(v) for v in value), key=repr)
    if isinstance(value, str) and type(value) is not str:
        return str.__str__(value)  # a Keyword/Symbol that reached an answer stays a string
    return value


def _key(key: Any) -> Any:
    if isinstance(key, str):
        name = str.__str__(key).replace("_", "-")
        if _KEYWORD_NAME.match(name):
            return Keyword(name)
        return str.__str__(key)
    return key
