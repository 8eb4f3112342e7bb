"""Every architecture the engine runs, on CPU in fp32, against sentence-transformers on the same weights.

Each checkpoint is tiny and random and saved by sentence-transformers itself
(tests/support/st_checkpoints.py); the engine loads the saved directory as a user's would and its
vectors must match `SentenceTransformer(path).encode(texts)` to cosine >= 0.99999 (the two
differ only in summation order). The texts are the shared workload's paragraphs plus
documents long enough to be truncated at the 256-token limit and to outgrow any sliding
window of the configs below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import load_texts
from tests.support.qwen3_checkpoints import MAX_SEQ_LEN, QUERY_PROMPT, tiny_config
from tests.support.st_checkpoints import (ModuleSpec, bert_tokenizer, bpe_encoder_tokenizer, llama_tokenizer, qwen_tokenizer,
                                  roberta_tokenizer, save_architecture, xlmr_tokenizer)

MIN_COSINE = 0.99999
# bf16 on the CPU (the default where the CPU computes it natively) against the same float32
# reference. EmbeddingGemma's layout, whose Dense modules widen the error, sets this bound; the
# BERT family stays much closer.
MIN_COSINE_BF16 = 0.998
_ENCODER_SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)


def _bert(vocab_size: int):
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, max_position_embeddings=512, **_ENCODER_SIZES)


def _roberta_like(config_name: str):
    """RoBERTa, XLM-R or CamemBERT: positions counted from padding_idx + 1 (514 for 512 tokens)."""
    def config(vocab_size: int):
        import transformers

        return getattr(transformers, config_name)(vocab_size=vocab_size, max_position_embeddings=514, pad_token_id=1,
                                                  bos_token_id=0, eos_token_id=2, **_ENCODER_SIZES)

    return config


def _distilbert(vocab_size: int):
    from transformers import DistilBertConfig

    return DistilBertConfig(vocab_size=vocab_size, dim=32, hidden_dim=64, n_layers=2, n_heads=4,
                            max_position_embeddings=512)


def _mpnet(vocab_size: int):
    from transformers import MPNetConfig

    return MPNetConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, max_position_embeddings=514, layer_norm_eps=1e-5)


def _mistral(vocab_size: int):
    from transformers import MistralConfig

    # A causal window of 48 tokens, which the long documents outgrow.
    return MistralConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                         sliding_window=48, rope_theta=5000.0)


def _modernbert(vocab_size: int):
    from transformers import ModernBertConfig

    # Local layers see 8 keys each side (local_attention 16), global every second layer from the first.
    specials = dict(pad_token_id=2, bos_token_id=0, cls_token_id=0, eos_token_id=1, sep_token_id=1)
    return ModernBertConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                            num_attention_heads=4, max_position_embeddings=512, local_attention=16,
                            global_attn_every_n_layers=2, global_rope_theta=40_000.0, local_rope_theta=5_000.0,
                            **specials)


def _gemma3(vocab_size: int):
    from transformers import Gemma3TextConfig

    # EmbeddingGemma's layout, shrunk: bidirectional, GQA, local layers seeing 8 keys each
    # side (sliding_window 16, halved for bidirectional models), a global layer every third,
    # a score scale that is not head_dim's.
    return Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=512, query_pre_attn_scalar=24,
        sliding_window=16, sliding_window_pattern=3, rope_theta=40_000.0, rope_local_base_freq=5_000.0,
        use_bidirectional_attention=True, pad_token_id=3, bos_token_id=1, eos_token_id=2)


def _normalize(width: int):
    from sentence_transformers.sentence_transformer.modules import Normalize

    return Normalize()


def _dense(out_features: int) -> ModuleSpec:
    """EmbeddingGemma's Dense: no bias, identity activation."""
    def make(width: int):
        from sentence_transformers.sentence_transformer.modules import Dense

        return Dense(width, out_features, bias=False, activation_function=torch.nn.Identity())

    return make


@dataclass(frozen=True)
class Spec:
    """One architecture's tiny checkpoint and the sentence-transformers modules around it."""

    architecture: str  # the engine's name for it (a key of engine.rose.models.MODEL_CLASSES)
    config: Callable  # vocabulary size -> a tiny Hugging Face config
    tokenizer: Callable[[Path], int]  # writes the tokenizer files, returns the vocabulary size
    pooling: str  # sentence-transformers' pooling mode
    after: tuple[ModuleSpec, ...] = (_normalize,)  # the modules after pooling
    prompts: dict[str, str] | None = None
    emphasize: tuple[str, ...] = ()  # parameters given 10x the random scale

    def save(self, path: Path) -> Path:
        return save_architecture(path, self.tokenizer, self.config, emphasize=self.emphasize, pooling=self.pooling,
                                 after=self.after, prompts=self.prompts, max_seq_length=MAX_SEQ_LEN)


SPECS = {
    "bert": Spec("bert", _bert, bert_tokenizer, "cls"),
    "roberta": Spec("bert", _roberta_like("RobertaConfig"), roberta_tokenizer, "mean"),
    "xlm-roberta": Spec("bert", _roberta_like("XLMRobertaConfig"), xlmr_tokenizer, "mean"),
    "camembert": Spec("bert", _roberta_like("CamembertConfig"), xlmr_tokenizer, "mean"),
    "distilbert": Spec("distilbert", _distilbert, bert_tokenizer, "mean"),
    "mpnet": Spec("mpnet", _mpnet, bert_tokenizer, "mean", emphasize=("relative_attention_bias",)),
    "modernbert": Spec("modernbert", _modernbert, bpe_encoder_tokenizer, "mean"),
    "gemma3": Spec("gemma3", _gemma3, llama_tokenizer, "mean"),
    # EmbeddingGemma as shipped: mean pooling, Dense 768 -> 3072 and 3072 -> 768 (here 64 -> 96 -> 48), Normalize.
    "embeddinggemma": Spec("gemma3", _gemma3, llama_tokenizer, "mean", after=(_dense(96), _dense(48), _normalize)),
    "mistral": Spec("mistral", _mistral, llama_tokenizer, "lasttoken", prompts={"query": QUERY_PROMPT, "document": ""}),
    # Qwen3-Embedding's layout (causal, last token, <|endoftext|> appended by the tokenizer);
    # pplx-embed's bidirectional Qwen3 needs its remote code: tests/models/test_st_modules.py.
    "qwen3": Spec("qwen3", tiny_config, qwen_tokenizer, "lasttoken", prompts={"query": QUERY_PROMPT, "document": ""}),
}


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return load_texts(300)


@pytest.fixture(scope="module")
def texts(corpus) -> list[str]:
    long_docs = ["\n\n".join(corpus[i:i + 12]) for i in range(100, 160, 12)]
    return ["x", "  Return the sum.\n", *corpus[:40], *long_docs]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module", params=sorted(SPECS))
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "model"
    return request.param, SPECS[request.param].save(path)


@pytest.fixture(scope="module")
def reference(checkpoint, texts):
    """sentence-transformers on the checkpoint, and its float32 vectors of `texts` by prompt name
    (None: no prompt): computed once for the engine's tests in both dtypes."""
    from sentence_transformers import SentenceTransformer

    arch, path = checkpoint
    model = SentenceTransformer(str(path), device="cpu")
    prompts = [None] + (["query"] if SPECS[arch].prompts else [])
    return model, {name: model.encode(texts, prompt_name=name, convert_to_numpy=True) for name in prompts}


@pytest.mark.slow  # an engine per architecture against sentence-transformers' encode
def test_engine_matches_sentence_transformers(checkpoint, texts, reference):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    arch, path = checkpoint
    engine = Engine(EngineConfig(dtype="float32", model=str(path), device="cpu", max_batch_tokens=2048))
    assert engine.spec.architecture == SPECS[arch].architecture
    assert max(len(ids) for ids in engine.tokenize(texts)) == MAX_SEQ_LEN  # the long documents were cut
    model, vectors = reference
    for prompt_name, expected in vectors.items():
        prefix = model.prompts[prompt_name] if prompt_name else ""
        ours = engine.embed([prefix + t for t in texts])
        assert ours.shape == expected.shape
        # Different texts must get clearly different vectors, or a match would say little.
        assert np.median(cosines(expected[:-1], expected[1:])) < 0.99
        worst = cosines(ours, expected)
        assert worst.min() >= MIN_COSINE, f"{arch}: worst cosine {worst.min()} at text {worst.argmin()}"


@pytest.mark.slow  # an engine per architecture, in bf16, against sentence-transformers' float32 encode
def test_engine_in_bf16_stays_within_its_tolerance(checkpoint, texts, reference):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    arch, path = checkpoint
    engine = Engine(EngineConfig(dtype="bfloat16", model=str(path), device="cpu", max_batch_tokens=2048))
    _, vectors = reference
    worst = cosines(engine.embed(texts), vectors[None])
    assert worst.min() >= MIN_COSINE_BF16, f"{arch}: worst cosine {worst.min()} at text {worst.argmin()}"


def test_end_token_is_appended_after_what_the_template_adds(tmp_path, corpus):
    """A Llama / Mistral tokenizer.json that only prepends <s> gets </s> appended for
    last-token pooling, and keeps its <s>; truncation leaves room for both."""
    import json

    from tokenizers.processors import TemplateProcessing

    from rose_embed.engine.text.tokenizer import ensure_end_token
    from tests.support.qwen3_checkpoints import train_tokenizer

    tok = train_tokenizer(corpus[:100], special_tokens=("<unk>", "<s>", "</s>"))
    tok.post_processor = TemplateProcessing(single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1",
                                            special_tokens=[("<s>", tok.token_to_id("<s>"))])
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    ensure_end_token(tmp_path, tok)
    tok.enable_truncation(8)
    encoding = tok.encode(corpus[0])
    assert len(encoding.ids) == 8 and encoding.tokens[0] == "<s>" and encoding.tokens[-1] == "</s>"


def test_modernbert_reads_hub_configs_as_transformers_does():
    """Hub checkpoints (nomic-ai/modernbert-embed-base, gte-modernbert-base) carry the 4.x keys
    (global_attn_every_n_layers, global_rope_theta, local_rope_theta); 5.x saves layer_types
    and rope_parameters. Both must give the layer kinds and rotary bases transformers gives."""
    from transformers import ModernBertConfig

    from rose_embed.engine.rose.layers.rotary import layer_type_rope_theta
    from rose_embed.engine.rose.models.modernbert import layer_types

    legacy = dict(num_hidden_layers=22, global_attn_every_n_layers=3, global_rope_theta=160000.0,
                  local_rope_theta=10000.0, local_attention=128)
    current = ModernBertConfig(**legacy).to_dict()
    for config in (legacy, current):
        assert layer_types(config) == current["layer_types"]
        for kind, key in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
            assert layer_type_rope_theta(config, kind, key, 0.0) == current["rope_parameters"][kind]["rope_theta"]


@pytest.mark.parametrize("bidirectional", [True, False])
def test_gemma3_reads_hub_configs_as_transformers_does(bidirectional):
    """EmbeddingGemma's hub config carries 4.x keys (rope_theta, rope_local_base_freq,
    sliding_window 512, sliding_window_pattern); 5.x saves layer_types and rope_parameters
    and halves a bidirectional window when it loads. Both must give transformers' layer
    kinds, rotary bases and window (|key - query| < its loaded sliding_window)."""
    from transformers import Gemma3TextConfig

    from rose_embed.engine.rose.layers.rotary import layer_type_rope_theta
    from rose_embed.engine.rose.models.gemma3 import Gemma3TextModel, layer_types

    legacy = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=7, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=16, max_position_embeddings=2048, sliding_window=512,
                  sliding_window_pattern=6, rope_theta=1_000_000.0, rope_local_base_freq=10_000.0,
                  query_pre_attn_scalar=256, use_bidirectional_attention=bidirectional, model_type="gemma3_text")
    loaded = Gemma3TextConfig(**legacy)
    current = loaded.to_dict()
    reach = loaded.sliding_window - 1  # the farthest key a local query sees
    for config in (legacy, current):
        assert layer_types(config) == current["layer_types"]
        for kind, key in (("full_attention", "rope_theta"), ("sliding_attention", "rope_local_base_freq")):
            assert layer_type_rope_theta(config, kind, key, 0.0) == current["rope_parameters"][kind]["rope_theta"]
        shape = Gemma3TextModel(config).attention_shape(is_causal=not bidirectional)
        assert shape.window == ((reach, reach) if bidirectional else (reach, 0))
        assert shape.scale == 256**-0.5


@pytest.mark.slow  # a server process per architecture
@pytest.mark.parametrize("arch,prompt_name", [("mpnet", None), ("mistral", "query")])
def test_served_by_the_real_server_to_concurrent_clients(arch, prompt_name, tmp_path, texts):
    """The server process with default flags, several clients at once (MPNet's relative
    bias; Mistral with its instruction prompt by name), against sentence-transformers."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from sentence_transformers import SentenceTransformer

    from rose_embed.engine.rose.cpu_features import native_bf16
    from tests.conftest import ServerProcess

    path = SPECS[arch].save(tmp_path / "model")
    expected = SentenceTransformer(str(path), device="cpu").encode(texts, prompt_name=prompt_name,
                                                                   convert_to_numpy=True)
    server = ServerProcess("--model", str(path))
    try:
        def post(lo: int) -> list[list[float]]:
            body = {"input": texts[lo:lo + 6], "model": path.name, **({"prompt_name": prompt_name} if prompt_name else {})}
            r = httpx.post(server.url + "/v1/embeddings", json=body, timeout=120)
            assert r.status_code == 200, r.text
            return [d["embedding"] for d in r.json()["data"]]

        with ThreadPoolExecutor(4) as pool:
            ours = np.array([v for chunk in pool.map(post, range(0, len(texts), 6)) for v in chunk])
    finally:
        server.stop()
    assert ours.shape == expected.shape
    # Default flags compute in bf16 on a CPU that has it natively (float32 elsewhere).
    assert cosines(ours, expected).min() >= (MIN_COSINE_BF16 if native_bf16() else MIN_COSINE)
