"""Engine facade: load a model once, then tokenize and execute packed batches."""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from rose_embed.engine.contract.batch import PackedBatch, pack
from rose_embed.engine.rose.batch_budget import LARGE_TOKENS, SEQ_TOKENS, cpu_budget, gpu_budget, measured_speed
from rose_embed.engine.rose.cpu_features import native_bf16
from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.contract.cpu_quota import available_cores
from rose_embed.engine.rose.quantization import int8_plan, support as quantization_support
from rose_embed.engine.rose.quantization.fp8_plan import quantize_model
from rose_embed.engine.rose.layers import fused
from rose_embed.engine.rose.attention.backends import make_attention_backend
from rose_embed.engine.rose.attention.ragged import AttentionBackend, SDPAPerSequenceBackend
from rose_embed.engine.rose.layers.cpu_packed_linear import pack_linears
from rose_embed.engine.rose.layers.cpu_vit_block import fuse_for_cpu
from rose_embed.engine.rose.layers.head import SentenceHead
from rose_embed.engine.rose.layers.label_head import LabelHead
from rose_embed.engine.rose.layers.m3_head import M3Head
from rose_embed.engine.rose.layers.maxsim_head import MaxSimHead
from rose_embed.engine.rose.layers.score_head import ScoreHead
from rose_embed.engine.rose.layers.sparse_head import SparseHead
from rose_embed.engine.rose.lazy import LazyResult
from rose_embed.engine.model_files.loader import ModelLoadError, ModelSpec, load_spec, load_state_dict
from rose_embed.engine.rose.models import MODEL_CLASSES
from rose_embed.engine.rose.pipeline import embed_texts
from rose_embed.engine.rose.runner import ModelRunner
from rose_embed.engine.text.pairs import reads_token_types
from rose_embed.engine.model_files.model_view import ModelView

logger = logging.getLogger("rose_embed.engine")

# The second warm-up batch on the CPU: enough sequences to run every path a batch of many takes.
CPU_WARM_UP_SEQS = 64
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but torch sees no CUDA device")
    return device


def resolve_dtype(name: str, device: torch.device) -> tuple[torch.dtype, str]:
    """The dtype `name` asks for on `device`, and why, for the start-up log. "auto": bf16 on a GPU,
    and on a CPU that computes bf16 natively (faster than float32 there, within the tolerance
    tests/models/test_parity.py and tests/models/test_architectures.py state); float32 on any other CPU,
    where bf16 would only be emulated."""
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16, "auto: bfloat16 on a GPU"
        feature = native_bf16()
        if feature is not None:
            return torch.bfloat16, f"auto: the CPU computes bfloat16 natively ({feature}); --dtype float32 for float32"
        return torch.float32, "auto: the CPU has no native bfloat16 (AVX512-BF16, AMX or Arm BF16)"
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of auto, {', '.join(_DTYPES)}; got {name!r}")
    return _DTYPES[name], "--dtype"


def head_for(spec: ModelSpec, state: dict[str, torch.Tensor], dtype: torch.dtype = torch.float32
             ) -> SentenceHead | MaxSimHead | M3Head | ScoreHead | LabelHead | SparseHead:
    """An embedder's pooling, the checkpoint's modules after it, truncate_dim and the final normalisation
    (a ColBERT model's, with the MaxSim scores of its rerank groups beside; BGE-M3's three outputs);
    a reranker's score head; a classifier's label head; from the checkpoint's own tensors `state`
    (float32 each); a sparse encoder's MLM head (in `dtype`, the model's) and SPLADE pooling."""
    if spec.sparse is not None:
        try:
            return SparseHead(spec.sparse, spec.hf_config, state, dtype).eval()
        except ValueError as exc:
            raise ModelLoadError(f"{spec.path}: {exc}") from exc
    if spec.reranker is not None or spec.classifier is not None:
        norm_eps = spec.hf_config.get("norm_eps", 1e-5)
        try:
            if spec.reranker is not None:
                return ScoreHead(spec.reranker, state, norm_eps).eval()
            return LabelHead(spec.classifier, state, norm_eps).eval()
        except ValueError as exc:
            raise ModelLoadError(f"{spec.path}: {exc}") from exc
    try:
        if spec.m3 is not None:
            return M3Head(spec.m3).eval()
        head = SentenceHead(spec.pooling, spec.head, spec.truncate_dim, spec.normalize)
        if spec.colbert is not None:  # its texts' token vectors, or its rerank groups' MaxSim scores
            return MaxSimHead(head, spec.colbert.query_length).eval()
        return head.eval()
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelLoadError(f"{spec.path}: the sentence-transformers modules' weights do not load: {exc}") from exc


def hidden_keys_backend(spec: ModelSpec, shape, attention) -> AttentionBackend | None:
    """Where a ColBERT model hides its queries' [MASK]s as keys (engine/contract/hidden_keys.py) and
    `attention` cannot (the GPU's own kernels and their CUDA graphs): the backend its batches that hide
    keys run on, eagerly (one exact SDPA call per sequence); its other batches (documents) keep
    `attention` and its graphs. None where `attention` hides keys itself. ValueError where a [MASK] past a
    sliding window's reach would see no key at all."""
    colbert = spec.colbert
    if shape.window is not None and shape.window[0] < colbert.query_length - 1:
        raise ValueError(f"{spec.name} does not attend to its queries' [MASK] tokens, and its sliding window "
                         f"({shape.window[0]} tokens back) is shorter than its query_length {colbert.query_length}: "
                         "a [MASK] past the window's reach would see no token at all")
    return None if getattr(attention, "takes_num_keys", False) else SDPAPerSequenceBackend(shape)


def pair_options(spec: ModelSpec) -> dict:
    """A BERT cross-encoder reads its document's tokens with the second token type: the pair
    tokenizer (engine/text/pairs.py) marks them in their ids, and the model must know to look."""
    if reads_token_types(spec):
        return {"token_types_in_ids": True}
    return {}


class Engine(ModelView):
    """The model, its tokenizer and the runner. `execute` belongs to one thread."""

    def __init__(self, config: EngineConfig):
        self.config = config
        super().__init__(load_spec(config.model, config.max_seq_len, config.model_overrides, config.revision))
        self.device = resolve_device(config.device)
        self.dtype, why = resolve_dtype(config.dtype, self.device)
        logger.info("%s on %s in %s (%s)", self.spec.name, self.device, str(self.dtype).removeprefix("torch."), why)
        if config.quantization is not None:
            self._refuse_quantization(config)
        if self.device.type == "cpu":
            # Torch's default counts the affinity mask's cores, not a container's CPU quota.
            torch.set_num_threads(config.num_threads or min(torch.get_num_threads(), available_cores()))

        model = MODEL_CLASSES[self.spec.architecture](self.spec.hf_config, **pair_options(self.spec))
        state = load_state_dict(self.spec.path)
        model.load_hf_weights(state)
        head = head_for(self.spec, state, self.dtype).to(self.device)
        del state  # the model and the head hold what they need of it
        model = model.to(device=self.device, dtype=self.dtype).eval()
        fused.set_fused_kernels(config.fused_kernels)
        shape = model.attention_shape(self.spec.is_causal).bounded_by(self.spec.max_seq_len)
        attention = make_attention_backend(config.attention_backend, shape, self.device, self.dtype)
        self.hidden_keys_attention = (hidden_keys_backend(self.spec, shape, attention)
                                      if self.spec.colbert is not None and self.spec.colbert.hides_expansion else None)
        self.compiled = False  # an int8 model compiled on its first batch (engine/rose/quantization/int8_compile.py)
        # The queue's token budget (warm-up may choose a smaller one) and the speed measured at it.
        self.max_batch_tokens, self.tokens_per_second = config.max_batch_tokens, 0.0
        self.express_batch_tokens = 0  # a GPU's budget while queries wait beside bulk requests (0: none)
        self.runner = self._runner(model, head, attention, config.enforce_eager or config.quantization == "fp8")
        if config.quantization == "fp8":
            # GPTQ calibrates on the model as loaded, run eagerly: no graph may hold it unquantized.
            logger.info("%s", quantize_model(model, config.fp8_plan, getattr(head, "pooling", None), self.embed))
            self.runner = self._runner(model, head, attention, config.enforce_eager)
        if config.quantization == "int8":
            logger.info("%s", int8_plan.quantize_model(model, self.embed))  # calibrates on the model as loaded
            if not config.enforce_eager:
                # Imported here: torch's compiler takes seconds to import, which every start would pay.
                from rose_embed.engine.rose.quantization.int8_compile import CompiledInt8Model

                self.runner.model = CompiledInt8Model(model, attention)
                self.compiled = True
        if self.device.type == "cpu" and config.quantization is None:  # oneDNN's layouts, once
            if isinstance(getattr(model, "vision_layers", None), torch.nn.ModuleList):
                model.vision_layers = fuse_for_cpu(model.vision_layers)  # the matmuls' epilogues do the rest
            pack_linears(model)  # bf16 only (engine/rose/layers/cpu_packed_linear.py)

    def _runner(self, model: torch.nn.Module, head, attention, enforce_eager: bool) -> ModelRunner:
        config = self.config
        clip = self.spec.clip
        return ModelRunner(model, head, attention, self.device, max_num_tokens=config.max_batch_tokens,
                           max_num_seqs=config.max_batch_seqs, max_seqlen=self.spec.max_seq_len,
                           enforce_eager=enforce_eager, hidden_keys_attention=self.hidden_keys_attention,
                           image_shape=None if clip is None else (clip.image_size, clip.image_seq_len))

    def _refuse_quantization(self, config: EngineConfig) -> None:
        """ValueError naming what --quantization needs that this model, device or dtype lacks."""
        spec, quantization = self.spec, config.quantization
        if spec.colbert is not None:  # its tolerance is stated for a text's vector, not for each token's
            raise ValueError(f"--quantization {quantization} serves embedders; {spec.name} is a multi-vector (ColBERT) "
                             "model")
        if spec.m3 is not None:  # measured on one vector per text, not on token vectors and lexical weights
            raise ValueError(f"--quantization {quantization} serves embedders; {spec.name} is a BGE-M3 model, whose "
                             "sparse and multi-vector outputs it was not measured on")
        refusal = (quantization_support.model_refusal(quantization, spec.architecture, spec.name, spec.kind)
                   or quantization_support.device_refusal(quantization, str(self.device))
                   or quantization_support.dtype_refusal(quantization, config.dtype))
        if refusal is None and spec.sparse is not None:
            refusal = f"--quantization {quantization} serves embedders; {spec.name} is a sparse encoder"
        if refusal is not None:
            raise ValueError(refusal)

    @property
    def weights_bytes(self) -> int:
        """Bytes the model's and its head's weights hold on the device (graphs and buffers come on top)."""
        modules = (self.runner.model, self.runner.head)
        return sum(t.numel() * t.element_size() for m in modules for t in (*m.parameters(), *m.buffers()))

    def interleave(self, between_layers) -> bool:
        """ModelRunner.interleave; False for a compiled model too, whose layers run as one graph."""
        return not self.compiled and self.runner.interleave(between_layers)

    def execute(self, seqs: list[np.ndarray]) -> LazyResult:
        """Launch one batch (within the token budget) and return its lazy vectors."""
        return self.execute_packed(pack(seqs))

    def execute_packed(self, batch: PackedBatch) -> LazyResult:
        return self.runner.execute(batch)

    def warm_up(self) -> None:
        """Run a small and a full-budget batch (on the CPU a batch of CPU_WARM_UP_SEQS) so that
        first requests pay no setup cost. A model with a vision tower has it captured on CUDA, a graph per
        image-count bucket (engine/rose/image_graphs.py).

        With attention_backend auto on CUDA the attention backends are timed first, per
        class of batch (engine/rose/attention/choice.py). On CUDA each batch runs twice:
        the first run of a graph bucket is eager (library set-up), the second captures its
        graph. With capture_at_start every bucket is captured now (seconds), so no request
        ever waits for a capture. An int8 model on the CPU compiles its layers here (see
        engine/rose/quantization/int8_compile.py).
        """
        choice = self.runner.choose_attention()  # before any graph is captured: it picks their kernels
        if choice is not None:
            logger.info("%s", choice)
        started = time.perf_counter()
        seq = np.full(min(self.spec.max_seq_len, 16), 100, dtype=np.int32)
        num = max(1, min(self.config.max_batch_seqs, self.config.max_batch_tokens // len(seq)))
        if self.device.type == "cpu" and not self.compiled:
            # Nothing on the CPU is captured or tuned per batch size: a full-budget batch would
            # spend seconds of every start computing nothing a smaller one does not set up.
            num = min(num, CPU_WARM_UP_SEQS)
        graphs = self.runner.graphs
        repeats = 2 * graphs.num_slots if graphs is not None else 1  # per slot: eager, then capture
        for seqs in ([seq], [seq] * num):
            for _ in range(repeats):
                self.execute(seqs).wait()
        if self.compiled:  # its first batch compiled it
            logger.info("int8: the model compiled (inductor, max-autotune) during a warm-up of %.1f s",
                        time.perf_counter() - started)
        if self.config.capture_at_start:
            self.runner.capture_all()
        if (num_image_graphs := self.runner.warm_up_images()):
            logger.info("the vision tower captured in %d CUDA graphs, one per image-count bucket", num_image_graphs)

    def measure_budget(self) -> None:
        """After warm-up, for a server's queue: the batch budget (chosen on the CPU where
        `choose_batch_tokens`, engine/rose/batch_budget.py) and the speed at it."""
        def run(seqs: list[np.ndarray]) -> None:
            self.execute(seqs).wait()

        config = self.config
        if self.device.type == "cpu" and config.choose_batch_tokens and not self.compiled:
            choice = cpu_budget(run, config.max_batch_tokens)
            self.max_batch_tokens = choice.max_batch_tokens
            how = "chosen at warm-up; --max-batch-tokens sets another"
        elif self.device.type == "cuda" and config.choose_batch_tokens:
            choice = gpu_budget(self.execute, min(config.max_batch_tokens, config.max_batch_seqs * SEQ_TOKENS))
            self.max_batch_tokens = choice.max_batch_tokens
            if choice.express_tokens < choice.max_batch_tokens:
                self.express_batch_tokens = choice.express_tokens
            how = "chosen at warm-up; --max-batch-tokens sets another"
        else:
            # A CPU's speed per token is the same from a few hundred tokens on: a full budget would take seconds.
            most = config.max_batch_tokens if self.device.type == "cuda" else LARGE_TOKENS
            choice = measured_speed(run, min(most, config.max_batch_tokens, config.max_batch_seqs * SEQ_TOKENS))
            how = "timed at warm-up on a batch of %d" % choice.max_batch_tokens
        self.tokens_per_second = choice.tokens_per_second
        logger.info("batches of at most %d tokens, %.1f ms each at %.0f tokens/s (%s)", self.max_batch_tokens,
                    1000 * self.max_batch_tokens / choice.tokens_per_second, choice.tokens_per_second, how)
        if choice.speeds:
            logger.info("tokens/s at each budget timed: %s",
                        ", ".join(f"{tokens}: {speed:,.0f}" for tokens, speed in choice.speeds))
        if self.express_batch_tokens:
            logger.info("while queries wait beside larger requests, batches of at most %d tokens (about %.1f ms)",
                        self.express_batch_tokens,
                        1000 * self.express_batch_tokens / dict(choice.speeds)[self.express_batch_tokens])

    def embed_images(self, pixel_values: np.ndarray) -> np.ndarray:
        """Synchronous: preprocessed images [N, 3, S, S] float32 (engine/image/preprocess.py) -> [N, dim]
        float32, in the space of the texts' vectors; batches of at most max_batch_seqs images.
        ValueError for a model without a vision tower."""
        if self.spec.clip is None:
            raise ValueError(f"{self.spec.name} embeds texts only: it has no vision tower")
        size = self.config.max_batch_seqs
        parts = [self.runner.execute_images(pixel_values[lo: lo + size]).wait()
                 for lo in range(0, len(pixel_values), size)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dimensions), np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Synchronous convenience (benchmarks, corpus jobs, Ray): texts -> [N, dim] float32.

        Texts are tokenized in threads while the device computes (engine/rose/pipeline.py); the
        batches are those `cut_batches` cuts from the whole list.
        """
        return embed_texts(self, texts)
