"""A ColBERT model's tokens and answer, without a model: queries and documents tokenized as PyLate's
ColBERT.tokenize builds them, one segment per kept token (engine/text/colbert_tokens.py), on the
default model's WordPiece tokenizer; a part's rows cut back into each text's vectors
(server/pipeline/colbert_ask.py); the side a request names; both encodings of the answer read back
(compat/multi_vector_wire.py)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from rose_embed.compat.multi_vector_wire import multi_vector
from rose_embed.engine.model_files.colbert import ColbertModel
from rose_embed.engine.model_files.loader import resolve_model_dir
from rose_embed.engine.text.colbert_tokens import ColbertTokenizer
from rose_embed.engine.text.tokenizer import TextTokenizer
from rose_embed.server.http.errors import APIError
from rose_embed.server.pipeline.colbert_ask import colbert_side, split_vectors

CLS, SEP, MASK, COMMA, BANG = 101, 102, 103, 1010, 999
Q, D = 30522, 30523  # the ids PyLate's added prefix tokens get after BERT's vocabulary


def _tokenizer(expansion: bool = True, query_length: int = 8, document_length: int = 10,
               hides_expansion: bool = False) -> ColbertTokenizer:
    colbert = ColbertModel(query_prefix_id=Q, document_prefix_id=D, query_length=query_length,
                           document_length=document_length, expansion_id=MASK if expansion else None,
                           hides_expansion=hides_expansion, skiplist_ids=frozenset({COMMA, BANG}), dense=())
    return ColbertTokenizer(TextTokenizer(resolve_model_dir(None)[0], max(query_length, document_length)), colbert)


def test_a_query_is_prefixed_and_expanded_with_mask_every_token_kept():
    (ids,), (segments,) = _tokenizer().encode(["hello, world"], is_query=True)
    assert ids.tolist() == [CLS, Q, 7592, COMMA, 2088, SEP, MASK, MASK]
    assert segments.tolist() == list(range(8))


def test_mask_tokens_the_model_does_not_attend_to_are_marked_as_hidden_keys():
    (ids,), (segments,) = _tokenizer(hides_expansion=True).encode(["hello, world"], is_query=True)
    assert ids.tolist() == [CLS, Q, 7592, COMMA, 2088, SEP, ~MASK, ~MASK]  # engine/contract/hidden_keys.py
    assert segments.tolist() == list(range(8))  # each still gives its vector
    (ids,), _ = _tokenizer(hides_expansion=True).encode(["hello, world"], is_query=False)
    assert ids.min() >= 0  # a document hides nothing


def test_a_long_query_is_cut_to_its_length_keeping_sep():
    (ids,), _ = _tokenizer().encode(["one two three four five six seven eight nine"], is_query=True)
    assert len(ids) == 8 and ids[:2].tolist() == [CLS, Q] and ids[-1] == SEP and MASK not in ids


def test_without_expansion_a_query_keeps_its_own_tokens():
    (ids,), (segments,) = _tokenizer(expansion=False).encode(["hello"], is_query=True)
    assert ids.tolist() == [CLS, Q, 7592, SEP] and segments.tolist() == [0, 1, 2, 3]


def test_a_document_drops_its_skiplist_tokens_from_the_segments_only():
    (ids,), (segments,) = _tokenizer().encode(["hello, world!"], is_query=False)
    assert ids.tolist() == [CLS, D, 7592, COMMA, 2088, BANG, SEP]
    assert segments.tolist() == [0, 1, 2, -1, 3, -1, 4]


def test_a_long_document_is_cut_at_document_length():
    (ids,), _ = _tokenizer().encode([" ".join(["word"] * 30)], is_query=False)
    assert len(ids) == 10 and ids[-1] == SEP


def test_a_parts_rows_are_cut_by_each_texts_segments():
    segments = [np.array([0, 1, -1, 2]), np.array([-1, 0]), np.array([0, 1])]
    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    parts = split_vectors(rows, segments)
    assert [p.shape[0] for p in parts] == [3, 1, 2]
    np.testing.assert_array_equal(parts[2], rows[4:])
    with pytest.raises(ValueError, match="token vectors came back"):
        split_vectors(rows[:5], segments)


@pytest.mark.parametrize("prompt_name,input_type,is_query", [
    (None, None, False), ("query", None, True), (None, "search_query", True), (None, "document", False),
    ("search_document", None, False)])
def test_the_side_a_request_names(prompt_name, input_type, is_query):
    assert colbert_side(prompt_name, input_type) is is_query


@pytest.mark.parametrize("prompt_name,input_type", [("classification", None), ("query", "document")])
def test_a_side_that_is_neither_is_a_400(prompt_name, input_type):
    with pytest.raises(APIError) as caught:
        colbert_side(prompt_name, input_type)
    assert caught.value.status == 400


def test_both_encodings_read_back_to_the_vectors():
    vectors = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    as_float = np.asarray(json.loads(bytes(multi_vector(vectors, "float"))), dtype=np.float32)
    as_base64 = np.frombuffer(base64.b64decode(json.loads(bytes(multi_vector(vectors, "base64")))), dtype="<f4")
    np.testing.assert_array_equal(as_float, vectors)
    np.testing.assert_array_equal(as_base64.reshape(-1, 4), vectors)
    assert json.loads(bytes(multi_vector(vectors[:0], "float"))) == []
