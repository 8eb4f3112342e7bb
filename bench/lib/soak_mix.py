"""The mixed soak's requests: every embedding route, rerank and tokenize, from one text to a
thousand, texts past the model's limit, and bad bodies, each with the answer it must get.

Each kind builds a request from a random generator and checks its answer: a good request must
be a 200 with one vector (or score) per input, each of the model's width; a bad one must be the
4xx that kind calls for, in the error envelope. Texts carry a fresh random number, so that no
cache can hide growth. Measures nothing itself: bench/soak.py sends these.
"""

from __future__ import annotations

import base64
import functools
import json
import random
from dataclasses import dataclass
from typing import Callable

EMBEDDER = "sentence-transformers/all-MiniLM-L6-v2"
RERANKER = "rr"  # the served name of the cross-encoder bench/soak.py serves beside the embedder


@dataclass(frozen=True)
class Request:
    kind: str
    path: str
    body: bytes
    expected: int  # the status it must get
    num_inputs: int  # vectors or scores a good answer holds
    is_good: bool


@dataclass(frozen=True)
class Texts:
    """The workload's words (for short texts), paragraphs (for medium ones) and long texts (past
    the model's limit, cut by the server)."""

    words: list[str]
    paragraphs: list[str]
    long: list[str]

    def short(self, rng: random.Random) -> str:
        return f"{rng.choice(self.words)} {rng.randrange(10**6)}"

    def medium(self, rng: random.Random) -> str:
        return f"{rng.choice(self.paragraphs)} {rng.randrange(10**6)}"

    def long_one(self, rng: random.Random) -> str:
        return f"{rng.randrange(10**6)} {rng.choice(self.long)}"


def make_texts(paragraphs: list[str], long_chars: int = 6000) -> Texts:
    words = sorted({w for t in paragraphs for w in t.split() if w.isalpha()})
    long = []
    for start in range(0, len(paragraphs), 7):  # several paragraphs, joined past the model's 256 or 512 tokens
        text = "\n\n".join(paragraphs[start:start + 7])
        while len(text) < long_chars:
            text += "\n\n" + text
        long.append(text[: long_chars * 2])
    return Texts(words, [p for p in paragraphs if p.strip()], long)


def _json(value) -> bytes:
    return json.dumps(value).encode()


def _openai(rng: random.Random, texts: list[str], kind: str) -> Request:
    body = {"input": texts if len(texts) > 1 or rng.random() < 0.5 else texts[0], "model": EMBEDDER,
            "encoding_format": rng.choice(["float", "base64"])}
    return Request(kind, "/v1/embeddings", _json(body), 200, len(texts), True)


def one_text(rng, t: Texts) -> Request:
    return _openai(rng, [t.short(rng)], "openai, 1 text")


def few_texts(rng, t: Texts) -> Request:
    return _openai(rng, [t.short(rng) if rng.random() < 0.5 else t.medium(rng) for _ in range(rng.randint(2, 64))],
                   "openai, 2-64 texts")


def bulk(rng, t: Texts) -> Request:
    # Mostly short texts: many sequences and a large answer, in tokens the two cores compute within the timeout.
    texts = [t.short(rng) if rng.random() < 0.8 else t.medium(rng) for _ in range(rng.randint(100, 1000))]
    return _openai(rng, texts, "openai, 100-1,000 texts")


def long_texts(rng, t: Texts) -> Request:
    return _openai(rng, [t.long_one(rng) for _ in range(rng.randint(1, 16))], "openai, texts past the limit")


def cohere(rng, t: Texts) -> Request:
    texts = [t.medium(rng) if rng.random() < 0.8 else t.long_one(rng) for _ in range(rng.randint(1, 96))]
    body = {"texts": texts, "model": EMBEDDER, "input_type": "search_document"}
    if rng.random() < 0.5:
        body["embedding_types"] = ["float"]
    return Request("cohere /v1/embed", "/v1/embed", _json(body), 200, len(texts), True)


def tei(rng, t: Texts) -> Request:
    texts = [t.medium(rng) if rng.random() < 0.8 else t.long_one(rng) for _ in range(rng.randint(1, 32))]
    body = {"inputs": texts if len(texts) > 1 or rng.random() < 0.5 else texts[0], "truncate": True}
    return Request("TEI /embed", "/embed", _json(body), 200, len(texts), True)


def rerank(rng, t: Texts) -> Request:
    documents = [t.medium(rng) if rng.random() < 0.9 else t.long_one(rng) for _ in range(rng.randint(2, 100))]
    body = {"model": RERANKER, "query": t.short(rng), "documents": documents}
    return Request("rerank /v1/rerank", "/v1/rerank", _json(body), 200, len(documents), True)


def tokenize(rng, t: Texts) -> Request:
    prompt = t.medium(rng) if rng.random() < 0.8 else t.long_one(rng)
    return Request("/tokenize", "/tokenize", _json({"prompt": prompt, "model": EMBEDDER}), 200, 1, True)


def invalid_json(rng, t: Texts) -> Request:
    body = _json({"input": [t.short(rng)], "model": EMBEDDER})[: -rng.randint(1, 5)]  # cut short
    return Request("bad: invalid JSON", "/v1/embeddings", body, 400, 0, False)


def wrong_model(rng, t: Texts) -> Request:
    body = {"input": [t.short(rng)], "model": f"no-such-model-{rng.randrange(10**6)}"}
    return Request("bad: wrong model", "/v1/embeddings", _json(body), 404, 0, False)


def empty_input(rng, t: Texts) -> Request:
    return Request("bad: empty input", "/v1/embeddings", _json({"input": [], "model": EMBEDDER}), 400, 0, False)


def too_many_inputs(rng, t: Texts) -> Request:
    body = {"input": [t.short(rng) for _ in range(2049)], "model": EMBEDDER}  # the default limit is 2,048
    return Request("bad: 2,049 inputs", "/v1/embeddings", _json(body), 400, 0, False)


@functools.cache
def _oversize_body() -> bytes:
    # Past the default 32 MiB body limit: one huge text. Built once: the client's copy is not the subject.
    return b'{"model": "%s", "input": ["' % EMBEDDER.encode() + b"a" * (33 << 20) + b'"]}'


def oversize(rng, t: Texts) -> Request:
    return Request("bad: 33 MiB body", "/v1/embeddings", _oversize_body(), 413, 0, False)


def untruncated_tei(rng, t: Texts) -> Request:
    return Request("bad: TEI past the limit, no truncate", "/embed", _json({"inputs": [t.long_one(rng)]}), 400, 0,
                   False)


# (weight, builder): the relative frequency of each kind.
MIX: list[tuple[int, Callable[[random.Random, Texts], Request]]] = [
    (30, one_text), (14, few_texts), (3, bulk), (6, long_texts), (8, cohere), (8, tei), (8, rerank), (6, tokenize),
    (4, invalid_json), (4, wrong_model), (4, empty_input), (2, too_many_inputs), (1, oversize), (2, untruncated_tei),
]


def pick(rng: random.Random, texts: Texts) -> Request:
    weights, builders = zip(*MIX)
    return rng.choices(builders, weights)[0](rng, texts)


def problem(request: Request, status: int, content: bytes, width: int) -> str | None:
    """What is wrong with an answer, or None when it is the one `request` must get."""
    if status != request.expected:
        return f"status {status}, expected {request.expected}: {content[:200]!r}"
    try:
        answer = json.loads(content)
    except ValueError:
        return f"not JSON: {content[:200]!r}"
    if not request.is_good:
        return None if isinstance(answer, dict) and "message" in answer.get("error", {}) else "no error envelope"
    rows = _rows(request.path, answer)
    if request.path == "/tokenize":
        return None if answer["count"] == len(answer["tokens"]) > 0 else f"tokens: {answer}"
    if len(rows) != request.num_inputs:
        return f"{len(rows)} answers for {request.num_inputs} inputs"
    if request.path == "/v1/rerank":
        return None if sorted(r["index"] for r in rows) == list(range(request.num_inputs)) else "indexes"
    widths = {len(base64.b64decode(row)) // 4 if isinstance(row, str) else len(row) for row in rows}
    return None if widths == {width} else f"widths {sorted(widths)}, expected {width}"


def _rows(path: str, answer) -> list:
    if path == "/v1/embeddings":
        return [item["embedding"] for item in answer["data"]]
    if path == "/v1/embed":
        embeddings = answer["embeddings"]
        return embeddings["float"] if isinstance(embeddings, dict) else embeddings
    if path == "/v1/rerank":
        return answer["results"]
    if path == "/embed":
        return answer
    return []
