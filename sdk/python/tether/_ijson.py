"""JSON as the server stores it: I-JSON (RFC 7493), which every client reads back the same.

The server refuses, as ``INVALID_JSON``, a number past the range of a double and a string with
a lone surrogate; here they are refused before anything is sent, as ``ValueError`` naming the
place, so that a mistake in a handler or a caller is not taken for a refusal of the server's (or,
over WebSocket, a closed session sent again and again)."""

from __future__ import annotations

import json
import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# A double's largest is 1.8e308: only an int of 309 digits or more can be past it.
_LONG_NUMBER = re.compile(r"\d{309}")


def dumps(value: Any) -> str:
    """The compact JSON of value, or ValueError for what I-JSON has no form for (NaN, the
    infinities, an int past a double's range, a lone surrogate), TypeError for what JSON has
    none for (a set, bytes, an object). Non-ASCII text is written as itself (UTF-8 on the
    wire), so that a lone surrogate stays one character to find."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    # The two searches run at C speed; the walk, which names the place, only when one finds.
    if _LONE_SURROGATE.search(text) or _LONG_NUMBER.search(text):
        _walk(value, "")
    return text


def _walk(value: Any, path: str) -> None:
    where = path or "the top level"
    if isinstance(value, str):
        m = _LONE_SURROGATE.search(value)
        if m:
            raise ValueError(f"a lone surrogate \\u{ord(m.group()):04x} in the string at {where} is not "
                             "I-JSON (RFC 7493): the server refuses it")
    elif isinstance(value, bool) or value is None or isinstance(value, float):
        return
    elif isinstance(value, int):
        try:
            float(value)  # rounds as the server's parser does: past the largest double, it overflows
        except OverflowError:
            raise ValueError(f"the number at {where} is past the range of a double, which is not I-JSON "
                             "(RFC 7493): the server refuses it") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            key = str(k)
            m = _LONE_SURROGATE.search(key)
            if m:
                raise ValueError(f"a lone surrogate \\u{ord(m.group()):04x} in a key of the object at {where} "
                                 "is not I-JSON (RFC 7493): the server refuses it")
            _walk(v, f"{path}.{key}" if path else key)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _walk(v, f"{path}[{i}]")
