"""Reading a SentencePiece model file (spiece.model: a serialized ModelProto) without the sentencepiece or
protobuf packages, which are not dependencies: a small reader of protobuf's wire format that keeps the
fields encoding needs and skips the rest.

Field numbers are sentencepiece_model.proto's:
- ModelProto: pieces = 1 (repeated SentencePiece), trainer_spec = 2, normalizer_spec = 3.
- SentencePiece: piece = 1 (string), score = 2 (float), type = 3 (enum; NORMAL where absent).
- TrainerSpec: model_type = 3 (UNIGRAM where absent), treat_whitespace_as_suffix = 24, byte_fallback = 35,
  unk_id = 40 (0 where absent).
- NormalizerSpec: precompiled_charsmap = 2 (bytes), add_dummy_prefix = 3, remove_extra_whitespaces = 4,
  escape_whitespaces = 5 (each true where absent).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rose_embed.engine.model_files.load_error import ModelLoadError

# SentencePiece.Type values.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNIGRAM = 1  # TrainerSpec.ModelType
SPACE_SYMBOL = "▁"  # how SentencePiece writes a space, in pieces and normalized text

# Wire types.
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


class ProtoError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


@dataclass(frozen=True)
class Piece:
    piece: str
    score: float
    type: int


@dataclass(frozen=True)
class SentencePieceModel:
    """What encoding a text with a SentencePiece model reads from its ModelProto."""

    pieces: tuple[Piece, ...]  # in id order
    model_type: int
    unk_id: int
    byte_fallback: bool
    treat_whitespace_as_suffix: bool
    precompiled_charsmap: bytes  # the normalization rules (empty: none)
    add_dummy_prefix: bool
    remove_extra_whitespaces: bool
    escape_whitespaces: bool


def read_sentencepiece_model(path: Path) -> SentencePieceModel:
    """The model in `path`; ModelLoadError where the file is missing or not a ModelProto."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"{path} cannot be read: {exc}") from exc
    try:
        return parse_model_proto(data)
    except (ProtoError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path} is not a SentencePiece model: {exc}") from exc


def parse_model_proto(data: bytes) -> SentencePieceModel:
    pieces, trainer, normalizer = [], {}, {}
    for number, value in _fields(data):
        if number == 1:
            pieces.append(_piece(_bytes(value)))
        elif number == 2:
            trainer.update(_fields(_bytes(value)))
        elif number == 3:
            normalizer.update(_fields(_bytes(value)))
    if not pieces:
        raise ProtoError("it holds no pieces")
    return SentencePieceModel(
        pieces=tuple(pieces), model_type=_int(trainer.get(3, UNIGRAM)), unk_id=_int(trainer.get(40, 0)),
        byte_fallback=bool(trainer.get(35, 0)), treat_whitespace_as_suffix=bool(trainer.get(24, 0)),
        precompiled_charsmap=_bytes(normalizer.get(2, b"")), add_dummy_prefix=bool(normalizer.get(3, 1)),
        remove_extra_whitespaces=bool(normalizer.get(4, 1)), escape_whitespaces=bool(normalizer.get(5, 1)),
    )


def _piece(data: bytes) -> Piece:
    fields = dict(_fields(data))
    score = fields.get(2, 0.0)
    if not isinstance(score, float):
        raise ProtoError("a piece's score is not a float")
    return Piece(piece=_bytes(fields.get(1, b"")).decode("utf-8"), score=score, type=_int(fields.get(3, NORMAL)))


def _fields(data: bytes) -> Iterator[tuple[int, int | float | bytes]]:
    """(field number, value) in the message's order: varints as ints, fixed32 as floats (the only fixed32
    fields read are floats), length-delimited fields as bytes; fixed64 fields are skipped."""
    at, end = 0, len(data)
    while at < end:
        key, at = _varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, at = _varint(data, at)
        elif wire_type == _FIXED32:
            if at + 4 > end:
                raise ProtoError("a fixed32 field runs past the end")
            value, at = struct.unpack_from("<f", data, at)[0], at + 4
        elif wire_type == _LENGTH_DELIMITED:
            size, at = _varint(data, at)
            if at + size > end:
                raise ProtoError("a length-delimited field runs past the end")
            value, at = data[at: at + size], at + size
        elif wire_type == _FIXED64:
            at += 8
            continue
        else:
            raise ProtoError(f"wire type {wire_type} is not one a ModelProto uses")
        yield number, value
    if at != end:
        raise ProtoError("the last field runs past the end")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ProtoError("a varint runs past the end")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _int(value) -> int:
    """A varint read as protobuf's int32 (negative numbers are ten-byte two's complement)."""
    if not isinstance(value, int):
        raise ProtoError("an integer field holds no varint")
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _bytes(value) -> bytes:
    if not isinstance(value, bytes):
        raise ProtoError("a string or message field is not length-delimited")
    return value
