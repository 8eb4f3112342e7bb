"""A request body as JSON bytes for msgspec, decoded strictly, and what to tell a client whose body
msgspec refuses where msgspec's own words would mislead.

- Decoded here, strictly: Litestar's own decoding would turn "8" into 8 for an int field.

- A leading UTF-8 byte-order mark is dropped: RFC 8259 lets a parser ignore it, Windows tools
  (PowerShell's Out-File, Notepad) write one, and msgspec would call it "invalid character
  (byte 0)". A UTF-16 or UTF-32 body is named as such: JSON on the wire is UTF-8.
- A string escape that is half a UTF-16 surrogate pair (`"\\ud800"` alone) is no Unicode text,
  and msgspec rightly refuses it, but says "Input data was truncated" or "invalid utf-16
  surrogate pair (byte N)". Python's json reads such escapes as they are, so the body is read
  again with it, on this error path only, to name the field that holds one.
"""

from __future__ import annotations

import codecs
import json
import re

import msgspec
from litestar import Request

from rose_embed.server.http.errors import APIError, invalid_request

UTF8_BOM = codecs.BOM_UTF8
# Longest first: UTF-32-LE's mark starts with UTF-16-LE's.
_OTHER_ENCODINGS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


async def read_json(request: Request, type: type):
    """The request's body, read whole and decoded as `type` (decode_json)."""
    return decode_json(await request.body(), type)


def decode_json(body: bytes, type: type):
    """Strict msgspec decoding into `type`; a body nested thousands deep is the client's error, not ours."""
    body = without_bom(body)
    try:
        return msgspec.json.decode(body, type=type)
    except RecursionError:
        raise invalid_request("The JSON body is nested too deeply to parse.") from None
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError as exc:
        explained = not_utf8(body) or unpaired_surrogate(body)
        if explained is None:
            raise
        raise explained from exc


def without_bom(body: bytes) -> bytes:
    return body[len(UTF8_BOM):] if body.startswith(UTF8_BOM) else body


def not_utf8(body: bytes) -> APIError | None:
    """The 400 for a body that starts with another encoding's byte-order mark, else None."""
    for mark, encoding in _OTHER_ENCODINGS:
        if body.startswith(mark):
            return invalid_request(f"The body is {encoding} text (it starts with a {encoding} byte-order mark); "
                                   "send the JSON encoded as UTF-8.")
    return None


def unpaired_surrogate(body: bytes) -> APIError | None:
    """The 400 naming the field whose string holds half a surrogate pair, else None."""
    if not _SURROGATE_ESCAPE.search(body):  # no such escape: msgspec's message stands
        return None
    try:
        found = _first_surrogate(json.loads(body), "")
    except (ValueError, RecursionError):  # broken elsewhere too: msgspec's message says where
        return None
    if found is None:
        return None
    path, char = found
    if len(path) > 200:  # keys are the client's: a path of megabytes would make a reply that size
        path = path[:200] + "..."
    where, param = (f"'{path}'", re.split(r"[.\[]", path, maxsplit=1)[0]) if path else ("The body", None)
    return invalid_request(f"{where} holds an unpaired UTF-16 surrogate (\\u{ord(char):04x}); "
                           "text must be valid Unicode", param)


def _first_surrogate(value, path: str) -> tuple[str, str] | None:
    """(where, the surrogate) of the first string in `value` that holds one; a key's is its
    object's (the key itself is not echoed: no JSON answer can hold it)."""
    if isinstance(value, str):
        match = _SURROGATE.search(value)
        return (path, match.group()) if match else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and (match := _SURROGATE.search(key)):
            return (path, match.group())
        inner = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
        found = _first_surrogate(item, inner)
        if found is not None:
            return found
    return None
