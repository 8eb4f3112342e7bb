"""ROSE on the GPU: every vector against a Hugging Face reference on the same (random) weights.

GPU tests are marked `gpu` and skipped without CUDA. Tolerances (cosine per vector):
bf16 engine vs fp32 reference >= 0.999; graph replay vs the eager run of the same padded
shapes >= 0.99999 (same kernels); graph vs --enforce-eager and a text alone vs inside a full
batch >= 0.9999 (different GEMM shapes, so bf16 rounding may differ a little).
The padding helpers are pure numpy and are checked on CPU too.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from rose_embed.engine.contract.batch import pack
from rose_embed.engine.rose.graphs import CUDAGraphRunner, _fill_padded, token_buckets
from rose_embed.engine.rose.attention.backends import make_attention_backend
from rose_embed.engine.rose.layers.head import SentenceHead
from rose_embed.engine.rose.models import MODEL_CLASSES
from rose_embed.engine.rose.runner import ModelRunner

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
BACKENDS = ["varlen", "packed", "flashinfer"]
MAX_NUM_TOKENS, MAX_NUM_SEQS, MAX_SEQLEN = 8192, 256, 512


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def random_seqs(seed: int, vocab_size: int, num: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(100), 0.8, num).astype(int), 1, MAX_SEQLEN)
    lengths[:2] = (1, MAX_SEQLEN)  # the extremes a bucket must handle
    return [rng.integers(5, vocab_size, n, dtype=np.int32) for n in lengths]


# --- CPU: the padding that makes every batch of a bucket the same shape -------------------

def test_token_buckets_double_to_1024_then_step_by_1024_up_to_the_budget():
    assert token_buckets(16384) == [64, 128, 256, 512] + [1024 * i for i in range(1, 17)]
    assert token_buckets(3000) == [64, 128, 256, 512, 1024, 2048, 3000]
    assert token_buckets(512) == [64, 128, 256, 512]


def test_padding_keeps_real_segments_and_bounds_dummy_ones():
    seqs = [np.arange(1, n + 1, dtype=np.int32) for n in (3, 7, 100)]
    batch = pack(seqs)
    bucket, chunk, num_segments = 512, 128, 8
    ids, pos = np.full(bucket, -1, np.int32), np.full(bucket, -1, np.int32)
    cu = np.full(num_segments + 1, -1, np.int32)
    seg = np.full(bucket, -7, np.int32)
    _fill_padded(batch, chunk, ids, pos, cu, seg)
    assert (ids[:110] == batch.input_ids).all() and (pos[:110] == batch.positions).all()
    # Each real token pools into its own sequence's segment, padding into none.
    assert list(seg[:110]) == [0] * 3 + [1] * 7 + [2] * 100 and (seg[110:] == -1).all()
    assert list(cu) == [0, 3, 10, 110, 238, 366, 494, 512, 512]
    lengths = np.diff(cu)
    assert lengths.min() >= 0 and lengths.max() <= chunk
    # Each dummy segment counts its positions from zero, like a real sequence.
    assert list(pos[110:113]) == [0, 1, 2] and pos[238] == 0 and pos[511] == 17


def test_layout_pads_tokens_segments_and_seqlen_to_powers_of_two():
    from rose_embed.engine.rose.attention.ragged import SDPAPerSequenceBackend

    graphs = CUDAGraphRunner(None, SDPAPerSequenceBackend(None), None, max_num_tokens=16384, max_num_seqs=512,
                             max_seqlen=512)
    assert graphs.layout(16, 1, 16) == (64, 2, 64)  # the 48 padding tokens make one dummy segment
    assert graphs.layout(700, 100, 40) == (1024, 128, 128)  # 324 padding tokens: 3 segments of <= 128
    assert graphs.layout(100, 3, 60) == (128, 4, 128)  # 28 padding tokens, max_seqlen 60 -> 128
    assert graphs.layout(9000, 100, 300) == (9216, 128, 512)  # 216 padding tokens in 1 segment
    assert graphs.layout(9000, 513, 300) is None  # past max_num_seqs: eager
    # Late-chunked documents pool more vectors than they have sequences: enough segments for them.
    assert graphs.layout(100, 3, 60, 20) == (128, 32, 128)
    assert graphs.layout(100, 3, 60, 3) == graphs.layout(100, 3, 60)
    assert graphs.layout(9000, 100, 300, 513) is None  # more vectors than a batch may pool: eager
    assert graphs.layout(16385, 10, 300) is None  # past the largest bucket: eager
    assert graphs.seqlen_buckets(64) == [64] and graphs.seqlen_buckets(4096) == [128, 256, 512]
    segments = CUDAGraphRunner.max_num_segments(16384, 512)
    for num_tokens, num_seqs, max_seqlen in [(16384, 512, 32), (9000, 512, 20), (64, 64, 1), (8193, 1, 1)]:
        assert graphs.layout(num_tokens, num_seqs, max_seqlen)[1] <= segments


@pytest.mark.parametrize(("num_slots", "num_modes"), [(1, 1), (2, 1), (1, 2)])
def test_capture_all_captures_every_slot_even_after_warm_up(monkeypatch, num_slots, num_modes):
    """capture_all once waited for a key's graph count to grow, forever when warm-up had
    already captured that key. Here a fake `_run` keeps the eager/capture/replay state. A head
    of several modes (MaxSimHead's texts and rerank groups) gets every key in each."""
    from rose_embed.engine.rose.graphs import GraphKey

    class FakeInputs:
        buffer = np.zeros(1 << 16, np.int32)

        def host_views(self, num_tokens, num_segments):
            b, t = self.buffer, num_tokens
            return b[:t], b[t : 2 * t], b[3 * t : 3 * t + num_segments + 1], b[2 * t : 3 * t]

    attention = type("Attention", (), {"num_graph_slots": num_slots})()
    graphs = CUDAGraphRunner(None, attention, FakeInputs(), max_num_tokens=2048, max_num_seqs=512, max_seqlen=512,
                             num_head_modes=num_modes)
    runs = []

    def fake_run(bucket, num_segments, max_seqlen, cu_seqlens_host, mode=0):
        slot = graphs._next_slot.get((bucket, num_segments, max_seqlen, mode), 0)
        graphs._next_slot[(bucket, num_segments, max_seqlen, mode)] = (slot + 1) % num_slots
        key = GraphKey(bucket, num_segments, max_seqlen, slot, mode=mode)
        runs.append(key)
        assert cu_seqlens_host is None or (len(cu_seqlens_host) == num_segments + 1 and cu_seqlens_host[-1] == bucket)
        if key not in graphs.graphs:
            if key not in graphs._warmed:
                graphs._warmed.add(key)
            else:
                graphs.graphs[key] = "captured"

    monkeypatch.setattr(graphs, "_run", fake_run)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    for _ in range(2 * num_slots):  # warm-up: this key is captured before capture_all
        fake_run(64, 2, 64, None)
    fake_run(2048, 512, 128, None)  # and this one half warmed
    graphs.capture_all()
    shapes = {(k.num_tokens, k.num_segments, k.max_seqlen) for k in runs}
    assert (64, 2, 64) in shapes and (2048, 512, 128) in shapes and len(shapes) > 50
    assert all(GraphKey(*shape, slot, mode=mode) in graphs.graphs
               for shape in shapes for slot in range(num_slots) for mode in range(num_modes))


# --- GPU ---------------------------------------------------------------------------------

def _bert_config(hidden: int, heads: int, layers: int = 2):
    from transformers import BertConfig

    return BertConfig(vocab_size=1024, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      intermediate_size=4 * hidden, max_position_embeddings=MAX_SEQLEN)


def _hf_bert(config):
    from transformers import BertModel

    torch.manual_seed(0)
    return BertModel(config, add_pooling_layer=False).cuda().float().eval()


def _ours(architecture: str, hf_model, dtype=torch.bfloat16):
    model = MODEL_CLASSES[architecture](hf_model.config.to_dict())
    model.load_hf_weights({k: v.detach().cpu() for k, v in hf_model.state_dict().items()})
    return model.to(device="cuda", dtype=dtype).eval()


def _runner(model, backend: str, is_causal: bool, pooling: str = "mean", enforce_eager: bool = False):
    dtype = next(model.parameters()).dtype
    attention = make_attention_backend(backend, model.attention_shape(is_causal), torch.device("cuda"), dtype)
    return ModelRunner(model, SentenceHead(pooling), attention, torch.device("cuda"),
                       max_num_tokens=MAX_NUM_TOKENS, max_num_seqs=MAX_NUM_SEQS, max_seqlen=MAX_SEQLEN,
                       enforce_eager=enforce_eager)


@torch.inference_mode()
def _hf_reference(hf_model, seqs: list[np.ndarray], pooling: str) -> np.ndarray:
    """fp32 Hugging Face forward on right-padded batches; mean (masked) or last-token pooling."""
    out = []
    for lo in range(0, len(seqs), 8):
        chunk = seqs[lo : lo + 8]
        longest = max(len(s) for s in chunk)
        ids = torch.zeros(len(chunk), longest, dtype=torch.long, device="cuda")
        mask = torch.zeros_like(ids)
        for i, s in enumerate(chunk):
            ids[i, : len(s)] = torch.from_numpy(s.astype(np.int64))
            mask[i, : len(s)] = 1
        hidden = hf_model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        if pooling == "mean":
            vec = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        else:
            vec = hidden[torch.arange(len(chunk)), mask.sum(1) - 1]
        out.append(torch.nn.functional.normalize(vec, dim=-1).cpu().numpy())
    return np.concatenate(out)


def _causal_bert_reference(hf_model, seqs: list[np.ndarray]) -> np.ndarray:
    """BERT with causal attention has no Hugging Face twin: our layers in fp32 with the exact
    per-sequence SDPA backend (is_causal=True), whose bidirectional twin matches HF."""
    model = _ours("bert", hf_model, torch.float32)
    return _runner(model, "sdpa", is_causal=True, enforce_eager=True).execute(pack(seqs)).wait()


def _skip_unavailable(backend: str, head_dim: int) -> None:
    from rose_embed.engine.rose.attention.cuda import FLASHINFER_HEAD_DIMS, flashinfer_available

    if backend == "flashinfer" and not flashinfer_available():
        pytest.skip("flashinfer is not installed")
    if backend == "flashinfer" and head_dim not in FLASHINFER_HEAD_DIMS:
        pytest.skip(f"flashinfer has no head_dim {head_dim} kernels")


def _check_engine(runner, eager_runner, seqs, reference) -> None:
    """Reference match, replay == eager, graph == --enforce-eager, alone == in a batch."""
    batch = pack(seqs)
    num_slots = runner.graphs.num_slots
    # Runs: each slot's first is eager, its second captures; the last is a pure replay.
    runs = [runner.execute(batch).wait() for _ in range(2 * num_slots + 1)]
    assert len(runner.graphs.graphs) == num_slots, "the batch should have been captured"
    for out in runs:
        assert out.shape == reference.shape
        assert cosines(out, reference).min() >= 0.999
    assert cosines(runs[-1], runs[0]).min() >= 0.99999
    eager = eager_runner.execute(batch).wait()
    assert cosines(eager, reference).min() >= 0.999
    assert cosines(runs[-1], eager).min() >= 0.9999
    for i in (0, 1, 5):  # the 1-token, the 512-token and a typical sequence, alone
        alone = [runner.execute(pack([seqs[i]])).wait() for _ in range(2 * num_slots + 1)]
        for vec in alone:
            assert cosines(vec, runs[-1][i : i + 1]).min() >= 0.9999


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("hidden,heads", [(384, 12), (256, 4)], ids=["head_dim32", "head_dim64"])
def test_bert_matches_reference(backend, is_causal, hidden, heads):
    _skip_unavailable(backend, hidden // heads)
    hf_model = _hf_bert(_bert_config(hidden, heads))
    seqs = random_seqs(1, 1024)
    reference = _causal_bert_reference(hf_model, seqs) if is_causal else _hf_reference(hf_model, seqs, "mean")
    model = _ours("bert", hf_model)
    _check_engine(_runner(model, backend, is_causal), _runner(model, backend, is_causal, enforce_eager=True),
                  seqs, reference)


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_qwen3_causal_last_token_matches_hf(backend):
    _skip_unavailable(backend, 64)
    from transformers import Qwen3Config, Qwen3Model

    config = Qwen3Config(vocab_size=1024, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=1024)
    torch.manual_seed(0)
    hf_model = Qwen3Model(config).cuda().float().eval()
    seqs = random_seqs(2, 1024)
    reference = _hf_reference(hf_model, seqs, "last")
    model = _ours("qwen3", hf_model)
    _check_engine(_runner(model, backend, True, "last"), _runner(model, backend, True, "last", enforce_eager=True),
                  seqs, reference)


def _write_model_dir(path, hf_model) -> None:
    """A model directory the loader accepts: config, safetensors weights, a word-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    hf_model.save_pretrained(path)
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{f"w{i}": i + 4 for i in range(1000)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": MAX_SEQLEN}))


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("capture_at_start", [False, True])
def test_engine_uses_graphs_on_cuda_by_default(tmp_path, capture_at_start):
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine

    hf_model = _hf_bert(_bert_config(384, 12))
    _write_model_dir(tmp_path, hf_model)
    engine = Engine(EngineConfig(model=str(tmp_path), max_batch_tokens=2048, capture_at_start=capture_at_start))
    assert engine.device.type == "cuda" and engine.dtype == torch.bfloat16
    # auto: varlen, the packed kernel (and FlashInfer where installed), timed per class at warm-up.
    assert engine.runner.graphs is not None and engine.runner.attention.name == "auto"
    started = time.perf_counter()
    engine.warm_up()
    seconds = time.perf_counter() - started
    captured = len(engine.runner.graphs.graphs)
    print(f"warm-up (capture_at_start={capture_at_start}): {captured} graphs in {seconds:.1f} s")
    assert set(engine.runner.attention.table) == set(engine.runner.graphs.graph_classes())
    if capture_at_start:  # every reachable (bucket, segments, max_seqlen) key of 6 buckets
        assert captured > len(engine.runner.graphs.buckets)
    else:  # warm-up ran its two batches until captured: one graph per slot of their class's backend
        assert 2 <= captured <= 2 * engine.runner.graphs.num_slots
        assert seconds < 60
    rng = np.random.default_rng(3)
    texts = [" ".join(f"w{i}" for i in rng.integers(0, 1000, n)) for n in rng.integers(1, 300, 32)]
    vectors = engine.embed(texts)
    reference = _hf_reference(hf_model, engine.tokenize(texts), "mean")
    assert cosines(vectors, reference).min() >= 0.999
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
