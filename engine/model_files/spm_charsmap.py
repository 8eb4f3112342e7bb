"""A SentencePiece model's precompiled character map (NormalizerSpec.precompiled_charsmap): rules that
replace a text (a character, or a few: a letter and its combining accent, Hangul jamo) by another, which
SentencePiece's normalizer applies longest first at each position (engine/text/spm_normalizer.py).

The blob is a uint32 (little-endian) size of a darts-clone double-array trie, the trie's uint32 units,
then the replacements, each ended by a NUL byte; a key is a rule's text in UTF-8 and its value the offset
of its replacement. A unit is the child of node n for byte b where it sits at n's base XOR b and its label
is b; a node whose unit has a leaf keeps its key's value in the unit at its base. The trie shares the
nodes of common endings (the rules of one model number hundreds of thousands; its nodes tens of
thousands), so what is read here is read node by node, never key by key.
"""

from __future__ import annotations

import struct
from array import array

import numpy as np

from rose_embed.engine.model_files.load_error import ModelLoadError

_LEAF_LABEL = 1 << 31  # in a label: set on leaf units, so that no byte matches one


class CharsMap:
    """The rules of a precompiled_charsmap, read node by node (module docstring)."""

    def __init__(self, blob: bytes):
        if len(blob) < 4 or (size := struct.unpack_from("<I", blob)[0]) % 4 or 4 + size > len(blob):
            raise ModelLoadError("the SentencePiece model's precompiled_charsmap is broken")
        self._units = array("I", blob[4: 4 + size])
        self._replacements = blob[4 + size:]
        self._children = _children(np.frombuffer(blob, dtype="<u4", count=size // 4, offset=4).astype(np.int64))
        # Rules of one character: str.translate's table.
        self.single = {text: self._replacement(node) for text, node in self._chars_from(0) if self._has_leaf(node)}
        # The characters a rule holds after its first: only where a text holds one may a longer rule apply.
        self.later_chars = frozenset(char for node in self._children if node and self._is_char_start(node)
                                     for char, _ in self._chars_from(node))

    def longest_match(self, text: str, at: int) -> tuple[int, str] | None:
        """(characters, replacement) of the longest rule that text[at:] starts with, or None."""
        units, node, best = self._units, 0, None
        for end in range(at, len(text)):
            for byte in text[end].encode("utf-8"):
                child = node ^ _offset(units[node]) ^ byte
                if child >= len(units) or units[child] & (_LEAF_LABEL | 0xFF) != byte:
                    return best
                node = child
            if self._has_leaf(node):
                best = (end + 1 - at, self._replacement(node))
        return best

    def _chars_from(self, node: int):
        """(character, node after it) for each character spelled from `node`."""
        stack = [(node, b"")]
        while stack:
            at, spelled = stack.pop()
            for byte, child in self._children.get(at, ()):
                key = spelled + bytes((byte,))
                try:
                    yield key.decode("utf-8"), child
                except UnicodeDecodeError:
                    if len(key) < 4:
                        stack.append((child, key))

    def _is_char_start(self, node: int) -> bool:
        return any(not 0x80 <= byte < 0xC0 for byte, _ in self._children.get(node, ()))

    def _has_leaf(self, node: int) -> bool:
        return bool((self._units[node] >> 8) & 1)

    def _replacement(self, node: int) -> str:
        at = self._units[node ^ _offset(self._units[node])] & 0x7FFFFFFF
        end = self._replacements.find(b"\0", at)
        if at >= len(self._replacements) or end < 0:
            raise ModelLoadError("the SentencePiece model's precompiled_charsmap points past its replacements")
        try:
            return self._replacements[at:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ModelLoadError("the SentencePiece model's precompiled_charsmap holds a rule that is not "
                                 "UTF-8") from exc


def _offset(unit):
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def _children(units: np.ndarray) -> dict[int, list[tuple[int, int]]]:
    """node -> [(byte, child)] for every node reachable from the root, one level at a time (numpy)."""
    bases = np.arange(len(units)) ^ _offset(units)
    labels = units & (_LEAF_LABEL | 0xFF)
    children: dict[int, list[tuple[int, int]]] = {}
    level = np.array([0])
    while len(level):
        found_parents, found_children, found_bytes = [], [], []
        for byte in range(1, 256):
            candidates = bases[level] ^ byte
            inside = candidates < len(units)
            hits = np.flatnonzero(inside)[labels[candidates[inside]] == byte]
            found_parents.append(level[hits])
            found_children.append(candidates[hits])
            found_bytes.append(np.full(len(hits), byte))
        parents, kids, edge_bytes = (np.concatenate(parts) for parts in (found_parents, found_children, found_bytes))
        for parent, byte, kid in zip(parents.tolist(), edge_bytes.tolist(), kids.tolist()):
            children.setdefault(parent, []).append((byte, kid))
        children.update({int(node): [] for node in level if int(node) not in children})
        level = np.unique(kids[[kid not in children for kid in kids.tolist()]]) if len(kids) else kids
    return children
