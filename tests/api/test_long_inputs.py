"""Inputs over the model's limit: --long-inputs truncate | chunk | error, and a request's `long_inputs`.

Served in process on the fake engine (tests/support/fake_engine.py), whose tokenizer is the default
model's (limit 256: [CLS] + 254 word pieces + [SEP]). Every expected vector is built here
window by window, from an untruncated tokenizer of our own and the fake's per-sequence
computation, not from engine/text/long_inputs.py, whose pure functions are tested apart first.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from tokenizers import Tokenizer

from rose_embed.compat.quantize import int8_tanh
from rose_embed.compat.tiktoken_ids import load_cl100k
from rose_embed.corpus.job import CorpusJob, run_job
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.text.long_inputs import FittedInputs, InputTooLongError, combine_windows, fit_texts, windows
from rose_embed.engine.text.tokenizer import TextTokenizer
from rose_embed.server.cli.main import build_parser, config_from_args
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, serve

MAX_SEQ_LEN = 256
CLS, SEP = 101, 102
PROMPTS = {"query": "query: "}


@pytest.fixture(scope="module")
def fake() -> FakeEngine:
    return FakeEngine(prompts=PROMPTS)


@pytest.fixture(scope="module")
def chunking(fake):
    """--long-inputs chunk, with a token budget of two full windows per batch."""
    with serve(fake, fake_config(long_inputs="chunk", engine=EngineConfig(device="cpu", max_batch_tokens=512))) as c:
        yield c


@pytest.fixture(scope="module")
def documents(texts) -> list[str]:
    """Three documents of different lengths past the limit (2, 3 and 5 windows), made of
    varied paragraphs so that their windows' vectors differ."""
    return ["\n\n".join(texts[lo: lo + n]) for lo, n in ((0, 12), (100, 19), (300, 33))]


def embed(client, body: dict):
    return client.post("/v1/embeddings", json={"model": FAKE_MODEL, "encoding_format": "float", **body})


def vectors_of(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([d["embedding"] for d in response.json()["data"]], dtype=np.float32)


def expected_windows(untruncated: Tokenizer, text: str, prompt: str = "") -> list[list[int]]:
    """[CLS] + prompt + 254 - len(prompt) of the text's word pieces + [SEP], consecutively."""
    content = untruncated.encode(text.strip(), add_special_tokens=False).ids
    prompt_ids = untruncated.encode(prompt.strip(), add_special_tokens=False).ids if prompt else []
    size = MAX_SEQ_LEN - 2 - len(prompt_ids)
    return [[CLS, *prompt_ids, *content[lo: lo + size], SEP] for lo in range(0, len(content), size)]


def expected_vector(fake: FakeEngine, windows_: list[list[int]], num_added: int = 2) -> np.ndarray:
    """OpenAI's cookbook: the windows' vectors averaged with their text-token counts as weights, then
    normalised (float64 here)."""
    vectors = fake.vectors_of([np.array(w) for w in windows_]).astype(np.float64)
    weights = np.array([len(w) - num_added for w in windows_], dtype=np.float64)
    mean = (vectors * weights[:, None]).sum(0) / weights.sum()
    return mean / np.linalg.norm(mean)


# ---- the pure pieces -------------------------------------------------------------------------------


def test_windows_fill_the_limit_and_wrap_each_like_a_text():
    content = list(range(1000, 1011))  # 11 tokens
    got = windows(content, before=(1, 7), after=(2,), max_seq_len=6)  # 3 content tokens per window
    assert [w.tolist() for w in got] == [
        [1, 7, 1000, 1001, 1002, 2], [1, 7, 1003, 1004, 1005, 2], [1, 7, 1006, 1007, 1008, 2], [1, 7, 1009, 1010, 2],
    ]
    assert all(w.dtype == np.int32 for w in got)
    with pytest.raises(ValueError, match="leave no room"):
        windows(content, before=(1, 7, 8), after=(2, 3), max_seq_len=5)


def test_combine_is_the_token_weighted_mean_then_normalised():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((3, 8)).astype(np.float32)
    mean = (vectors[0] * 254 + vectors[1] * 254 + vectors[2] * 17) / 525
    np.testing.assert_allclose(combine_windows(vectors, [254, 254, 17], normalize=True),
                               mean / np.linalg.norm(mean), rtol=0, atol=1e-6)
    # A quantising model's raw vectors keep their scale (its int8 output reads it).
    np.testing.assert_allclose(combine_windows(vectors, [254, 254, 17], normalize=False), mean, rtol=0, atol=1e-6)
    # Inputs of one sequence keep their vector bit for bit; windows are combined in place.
    fitted = FittedInputs(seqs=[np.zeros(3)] * 5, num_windows=[1, 3, 1], weights=[9, 254, 254, 17, 9])
    rows = np.concatenate([np.full((1, 8), 5.0, np.float32), vectors, np.full((1, 8), -5.0, np.float32)])
    out = fitted.combine(rows, normalize=True)
    assert out.shape == (3, 8)
    assert (out[0] == 5.0).all() and (out[2] == -5.0).all()
    np.testing.assert_allclose(out[1], mean / np.linalg.norm(mean), rtol=0, atol=1e-6)


def test_wrapping_is_read_from_the_post_processor(fake, tmp_path):
    assert fake.tokenizer.wrapping() == ((CLS,), (SEP,))
    # A byte-level BPE whose end token the engine installs (Qwen3-Embedding's older tokenizer.json).
    from tests.support.qwen3_checkpoints import END_TOKEN, train_tokenizer

    bpe = train_tokenizer(["a probe of the special tokens", "some words to learn merges from"], vocab_size=300)
    bpe.save(str(tmp_path / "tokenizer.json"))
    tokenizer = TextTokenizer(tmp_path, 16, append_end_token=True, strip_texts=False)
    assert tokenizer.wrapping() == ((), (bpe.token_to_id(END_TOKEN),))


def test_error_mode_names_the_untruncated_length(fake, untruncated, documents):
    seqs = fake.tokenize(["short", documents[1]])
    with pytest.raises(InputTooLongError) as info:
        fit_texts(fake.tokenizer, "error", ["short", documents[1]], "", seqs)
    assert (info.value.index, info.value.max_seq_len) == (1, MAX_SEQ_LEN)
    assert info.value.num_tokens == len(untruncated.encode(documents[1]).ids)


# ---- the server ------------------------------------------------------------------------------------


def test_chunk_equals_window_by_window(chunking, fake, untruncated, documents):
    """Short and long inputs mixed: every long one is its windows' weighted mean, the short ones are
    embedded as always, in order, and usage counts every window's tokens."""
    short = ["a short text", "another one"]
    inputs = [short[0], documents[0], documents[1], short[1], documents[2]]
    before = len(fake.batches)
    r = embed(chunking, {"input": inputs})
    got = vectors_of(r)
    cut = [expected_windows(untruncated, d) for d in documents]
    assert [len(c) for c in cut] == [2, 3, 5]  # what the documents are for
    np.testing.assert_allclose(got[[0, 3]], fake.embed(short), rtol=0, atol=1e-6)
    for row, windows_ in zip((1, 2, 4), cut):
        np.testing.assert_allclose(got[row], expected_vector(fake, windows_), rtol=0, atol=1e-6)
        assert abs(np.linalg.norm(got[row]) - 1) < 1e-6
    num_tokens = sum(len(s) for s in fake.tokenize(short)) + sum(len(w) for c in cut for w in c)
    assert r.json()["usage"] == {"prompt_tokens": num_tokens, "total_tokens": num_tokens}
    # The windows were the batcher's inputs like any other: cut into batches of at most 512 tokens.
    computed = fake.batches[before:]
    assert sum(n for n, _ in computed) == 2 + 10 and sum(t for _, t in computed) == num_tokens
    assert max(t for _, t in computed) <= 512 and len(computed) >= 5


def test_the_prompt_opens_every_window(chunking, fake, untruncated, documents):
    r = embed(chunking, {"input": [documents[1], "short"], "prompt_name": "query"})
    cut = expected_windows(untruncated, documents[1], PROMPTS["query"])
    assert all(w[1:3] == untruncated.encode("query:", add_special_tokens=False).ids for w in cut)
    got = vectors_of(r)
    np.testing.assert_allclose(got[0], expected_vector(fake, cut, num_added=4), rtol=0, atol=1e-6)
    np.testing.assert_allclose(got[1], fake.embed(["query: short"])[0], rtol=0, atol=1e-6)


def test_a_request_overrides_the_servers_mode(client, chunking, fake, untruncated, documents):
    doc = documents[1]
    truncated = fake.embed([doc])[0]
    chunked = expected_vector(fake, expected_windows(untruncated, doc))
    np.testing.assert_allclose(vectors_of(embed(client, {"input": doc}))[0], truncated, atol=1e-6)
    np.testing.assert_allclose(vectors_of(embed(client, {"input": doc, "long_inputs": "chunk"}))[0], chunked, atol=1e-6)
    np.testing.assert_allclose(vectors_of(embed(chunking, {"input": doc}))[0], chunked, atol=1e-6)
    r = embed(chunking, {"input": doc, "long_inputs": "truncate"})
    np.testing.assert_allclose(vectors_of(r)[0], truncated, atol=1e-6)
    assert r.json()["usage"]["prompt_tokens"] == MAX_SEQ_LEN
    assert embed(chunking, {"input": doc, "long_inputs": None}).json()["usage"]["prompt_tokens"] > MAX_SEQ_LEN
    r = embed(chunking, {"input": ["short", doc], "long_inputs": "error"})
    assert r.status_code == 400
    num_tokens = len(untruncated.encode(doc).ids)
    assert r.json()["error"] == {
        "message": f"This model's maximum context length is {MAX_SEQ_LEN} tokens, however you requested "
        f"{num_tokens} tokens ({num_tokens} in your prompt; 0 for the completion). "
        "Please reduce your prompt; or completion length.",
        "type": "invalid_request_error", "param": None, "code": None,
    }
    # Inputs within the limit are embedded alike in every mode.
    for mode in ("truncate", "chunk", "error"):
        np.testing.assert_allclose(vectors_of(embed(chunking, {"input": "short", "long_inputs": mode}))[0],
                                   fake.embed(["short"])[0], atol=1e-6)


@pytest.mark.parametrize("value", ["chunks", "", "TRUNCATE", "none"])
def test_an_unknown_mode_is_a_400_naming_the_field(client, value):
    r = embed(client, {"input": "text", "long_inputs": value})
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "long_inputs", None)
    assert error["message"] == f"'long_inputs' must be one of truncate, chunk, error; got {value!r}"


@pytest.mark.parametrize("value", [1, True, ["chunk"], {"mode": "chunk"}])
def test_a_mode_of_the_wrong_type_is_a_400_naming_the_field(client, value):
    r = embed(client, {"input": "text", "long_inputs": value})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "long_inputs"


def test_dimensions_and_encodings_apply_to_the_combined_vector(chunking, fake, untruncated, documents):
    doc = documents[2]
    combined = expected_vector(fake, expected_windows(untruncated, doc))
    cut = combined[:16] / np.linalg.norm(combined[:16])
    np.testing.assert_allclose(vectors_of(embed(chunking, {"input": doc, "dimensions": 16}))[0], cut, atol=1e-6)
    r = embed(chunking, {"input": doc, "encoding_format": "base64", "dimensions": 16})
    decoded = np.frombuffer(base64.b64decode(r.json()["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(decoded, cut, atol=1e-6)


def test_a_quantising_model_quantises_the_raw_weighted_mean(untruncated, documents):
    """int8 reads the raw vectors' scale: the windows' weighted mean is not normalised first."""
    fake = FakeEngine(quantizing=True)
    doc = documents[1]
    cut = expected_windows(untruncated, doc)
    raw = fake.vectors_of([np.array(w) for w in cut]).astype(np.float64)
    weights = np.array([len(w) - 2 for w in cut], dtype=np.float64)
    mean = (raw * weights[:, None]).sum(0) / weights.sum()
    with serve(fake, fake_config(long_inputs="chunk")) as client:
        got = embed(client, {"input": doc, "encoding_format": "int8"}).json()["data"][0]["embedding"]
        floats = vectors_of(embed(client, {"input": doc}))[0]
    assert got == int8_tanh(mean.astype(np.float32)[None])[0].tolist()
    np.testing.assert_allclose(floats, mean / np.linalg.norm(mean), atol=1e-6)


def test_cl100k_ids_are_chunked_as_their_text(chunking, fake, untruncated, documents):
    ids = load_cl100k().encode_ordinary(documents[1])
    got = vectors_of(embed(chunking, {"input": [ids, ids[:5]]}))
    np.testing.assert_allclose(got[0], expected_vector(fake, expected_windows(untruncated, documents[1])), atol=1e-6)


def test_model_ids_are_windowed_and_wrapped_alike(fake, untruncated, documents):
    content = untruncated.encode(documents[1], add_special_tokens=False).ids
    cut = expected_windows(untruncated, documents[1])
    with serve(fake, fake_config(token_ids="model", long_inputs="chunk")) as client:
        wrapped = embed(client, {"input": [[CLS, *content, SEP], [CLS, 7592, SEP]]})
        bare = embed(client, {"input": [content]})
    expected = expected_vector(fake, cut)
    np.testing.assert_allclose(vectors_of(wrapped)[0], expected, atol=1e-6)
    np.testing.assert_allclose(vectors_of(wrapped)[1], fake.vectors_of([np.array([CLS, 7592, SEP])])[0], atol=1e-6)
    np.testing.assert_allclose(vectors_of(bare)[0], expected, atol=1e-6)
    assert bare.json()["usage"]["prompt_tokens"] == sum(len(w) for w in cut)


def test_truncated_model_ids_keep_their_end_token(fake, untruncated, documents, tmp_path):
    """Over-long ids of the model's own, wrapped as /tokenize gives them, are cut as the tokenizer cuts
    their text: the end token stays last, where a last-token-pooled model reads its vector. Bare
    ids are cut as sent."""
    content = untruncated.encode(documents[1], add_special_tokens=False).ids
    with serve(fake, fake_config(token_ids="model")) as client:
        got = vectors_of(embed(client, {"input": [[CLS, *content, SEP], content]}))
    np.testing.assert_allclose(got[0], fake.vectors_of([np.array([CLS, *content[:MAX_SEQ_LEN - 2], SEP])])[0],
                               atol=1e-6)
    np.testing.assert_allclose(got[1], fake.vectors_of([np.array(content[:MAX_SEQ_LEN])])[0], atol=1e-6)

    from tests.support.qwen3_checkpoints import END_TOKEN, train_tokenizer

    bpe = train_tokenizer(["a probe of the special tokens", "some words to learn merges from"], vocab_size=300)
    bpe.save(str(tmp_path / "tokenizer.json"))
    qwen = TextTokenizer(tmp_path, 16, append_end_token=True, strip_texts=False)
    end = bpe.token_to_id(END_TOKEN)
    assert qwen.truncate_ids([*range(40, 70), end]).tolist() == [*range(40, 55), end]
    assert qwen.truncate_ids(list(range(40, 70))).tolist() == list(range(40, 56))


def test_the_request_cap_counts_every_window(fake, documents):
    with serve(fake, fake_config(long_inputs="chunk", max_request_tokens=1000)) as client:
        assert embed(client, {"input": documents[1]}).status_code == 200  # 3 windows, under 1000 tokens
        r = embed(client, {"input": documents[2]})  # 5 windows
    assert r.status_code == 400 and r.json()["error"]["code"] == "max_tokens_per_request"


def test_the_character_cap_hint_fits_the_mode(fake):
    with serve(fake, fake_config(max_input_chars=100)) as client:
        truncating = embed(client, {"input": "x" * 101}).json()["error"]["message"]
        chunking = embed(client, {"input": "x" * 101, "long_inputs": "chunk"}).json()["error"]["message"]
    assert "send shorter texts" in truncating
    assert "--max-input-chars" in chunking and "first tokens" not in chunking


# ---- the flags -------------------------------------------------------------------------------------


def test_long_inputs_flag_replaces_no_truncate(capsys):
    assert config_from_args(build_parser().parse_args(["serve"])).long_inputs == "truncate"
    for mode in ("truncate", "chunk", "error"):
        assert config_from_args(build_parser().parse_args(["serve", "--long-inputs", mode])).long_inputs == mode
    for flags in (["--long-inputs", "split"], ["--no-truncate"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", *flags])
    assert "--no-truncate" not in build_parser().format_help()
    embed_args = build_parser().parse_args(["embed", "in.jsonl", "-o", "out.npy", "--long-inputs", "chunk"])
    assert embed_args.long_inputs == "chunk"


# ---- the corpus job --------------------------------------------------------------------------------


def test_corpus_job_chunks_as_the_server_does(tmp_path, fake, chunking, documents):
    rows = ["a short text", documents[0], "another one", documents[2]]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in rows), encoding="utf-8")
    job = CorpusJob(input=source, output=tmp_path / "out.npy", output_format="npy", chunk_size=3,
                    long_inputs="chunk", quiet=True)
    run_job(fake, job)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), vectors_of(embed(chunking, {"input": rows})), atol=1e-6)
    with pytest.raises(ValueError, match="text 2 of the input .* more than the model's limit of 256"):
        run_job(fake, CorpusJob(input=source, output=tmp_path / "err.npy", output_format="npy", chunk_size=3,
                                long_inputs="error", quiet=True))


def test_a_request_refused_part_way_says_its_count_is_a_lower_bound(fake):
    """A large request is tokenized part by part and refused as soon as it passes the cap: the
    answer says how many tokens it held at least, not a total it never counted."""
    texts = [f"word {i} " * 4 for i in range(400)]  # parts of 16, 32, then 64 texts
    whole = sum(len(s) for s in fake.tokenize(texts))
    with serve(fake, fake_config(max_request_tokens=500)) as client:
        r = embed(client, {"input": texts})
        small = embed(client, {"input": texts[:60]})  # one part: counted whole
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "max_tokens_per_request"
    counted = int(error["message"].split("at least ", 1)[1].split(" ", 1)[0])
    assert 500 < counted < whole
    assert error["message"] == (f"Requested at least {counted} tokens (counting stopped once past the cap), "
                                "max 500 tokens per request")
    exact = sum(len(s) for s in fake.tokenize(texts[:60]))
    assert small.json()["error"]["message"] == f"Requested {exact} tokens, max 500 tokens per request"
