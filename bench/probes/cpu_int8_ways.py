"""The ways of running one int8 linear on the CPU that bench/probes/cpu_int8_paths.py measures.

Each way is built from one linear's float32 weight [N, K] and bias [N] (and, for the static
way, calibration activations) and returns a callable from the way's input (bf16 or fp32 torch
tensor, or a float32 numpy array for ONNX Runtime and OpenVINO) to its output [M, N].
Every int8 way quantizes its weight per output channel, symmetric (absmax / 127), and does
its activation quantization, integer matmul and dequantization inside the call.

A way whose package is missing is skipped (`available`): torch's ways run from the project's
venv; torchao, ONNX Runtime and OpenVINO need the separate venv of bench/results/cpu/README.md.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from rose_embed.engine.rose.quantization.int8 import Int8Linear, token_scales, weight_int8  # the engine's, shared


@dataclass(frozen=True)
class Way:
    name: str
    input: str  # "bf16", "fp32" (torch) or "numpy" (float32 array)
    activations: str  # how activations are quantized
    kernel: str  # what runs the integer matmul, and what is fused around it
    build: Callable  # (weight [N, K] fp32, bias [N] fp32, calibration [T, K] fp32, num_tokens) -> callable
    needs: str | None = None  # a module that must import
    # A compiled way with its weights folded in as constants cannot take another layer's weights
    # without compiling again: its quality over every layer is taken from this eager way's.
    twin: str | None = None

    def available(self) -> bool:
        return self.needs is None or importlib.util.find_spec(self.needs) is not None


class IntMM(torch.nn.Module):
    """(a) int8 x int8 -> int32 by torch._int_mm (oneDNN's s8s8s32 gemm), scales after."""

    def __init__(self, weight, bias):
        super().__init__()
        qweight, scale = weight_int8(weight)
        self.register_buffer("qweight_t", qweight.t().contiguous())  # [K, N]: faster than a transposed view
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias.float())

    def forward(self, x):
        s = token_scales(x)
        q = torch.round(x / s).clamp(-127, 127).to(torch.int8)
        return (torch._int_mm(q, self.qweight_t).float() * s * self.scale + self.bias).to(x.dtype)


def OneDnnU8(weight, bias, out_dtype=torch.bfloat16) -> torch.nn.Module:  # noqa: N802  (a layer, named as one)
    """(c) the engine's int8 linear (engine/rose/quantization/int8.py): onednn::qlinear_pointwise on uint8
    activations (per-token symmetric, shifted by 128 and given zero point 128), weight prepacked;
    the kernel applies the weight scales, the token scale and bias follow. int8 activations would
    fall to oneDNN's reference kernel on a CPU without AMX (the prepacked weight carries uint8's
    compensation), thousands of times slower."""
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    return Int8Linear(linear.to(out_dtype))


def _compiled(module: torch.nn.Module, example: torch.Tensor, freezing: bool, mode: str | None):
    module = module.eval()
    compiled = torch.compile(module, mode=mode, dynamic=False)
    import torch._inductor.config as inductor_config

    with torch.no_grad(), inductor_config.patch(freezing=freezing):
        compiled(example)  # compiles here, under this config

    def call(x):
        with torch.no_grad():
            return compiled(x)
    return call


def _example(num_tokens, k, dtype=torch.bfloat16):
    return torch.randn(num_tokens, k).to(dtype)


def _eager(module):
    module = module.eval()

    def call(x):
        with torch.no_grad():
            return module(x)
    return call


def _fbgemm(weight, bias, calib, num_tokens):
    """(b) quantized::linear_dynamic: per-tensor dynamic uint8 activations, fp32 in and out."""
    torch.backends.quantized.engine = "x86"
    qweight, scale = weight_int8(weight)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated in torch 2.13
        w = torch._make_per_channel_quantized_tensor(qweight, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0)
        packed = torch.ops.quantized.linear_prepack(w, bias.float())
    return lambda x: torch.ops.quantized.linear_dynamic(x, packed, False)


def _torchao_linear(weight, bias):
    """(e) a bf16 nn.Linear under torchao's Int8DynamicActivationInt8WeightConfig (per-row symmetric activations)."""
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    linear = torch.nn.Linear(weight.shape[1], weight.shape[0]).to(torch.bfloat16)
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    quantize_(linear, Int8DynamicActivationInt8WeightConfig())
    return linear


def _torchao(weight, bias, calib, num_tokens):
    return _compiled(_torchao_linear(weight, bias), _example(num_tokens, weight.shape[1]), True, "max-autotune")


def _torchao_eager(weight, bias, calib, num_tokens):
    return _eager(_torchao_linear(weight, bias))


def _onnx_linear(weight, bias, per_token: bool):
    """An ONNX graph of the linear: fp32 MatMul + Add, or (per_token) the per-token uint8 graph:
    |x| row max -> scale -> round(x / s) + 128 -> MatMulInteger with zero point 128 -> * s * w_scale + b."""
    from onnx import TensorProto, helper, numpy_helper

    n, k = weight.shape
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])
    b = numpy_helper.from_array(bias.numpy().astype(np.float32), "b")
    if not per_token:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y"])]
        inits = [numpy_helper.from_array(weight.t().contiguous().numpy(), "w"), b]
    else:
        qweight, scale = weight_int8(weight)
        const = lambda value, name, dtype: numpy_helper.from_array(np.array(value, dtype), name)  # noqa: E731
        nodes = [helper.make_node("Abs", ["x"], ["ax"]), helper.make_node("ReduceMax", ["ax"], ["amax"], axes=[1]),
                 helper.make_node("Mul", ["amax", "inv127"], ["s0"]), helper.make_node("Max", ["s0", "eps"], ["s"]),
                 helper.make_node("Div", ["x", "s"], ["xs"]), helper.make_node("Round", ["xs"], ["xr"]),
                 helper.make_node("Add", ["xr", "c128"], ["xu"]), helper.make_node("Cast", ["xu"], ["q"], to=TensorProto.UINT8),
                 helper.make_node("MatMulInteger", ["q", "wq", "zp"], ["acc"]),
                 helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
                 helper.make_node("Mul", ["accf", "ws"], ["y0"]), helper.make_node("Mul", ["y0", "s"], ["y1"]),
                 helper.make_node("Add", ["y1", "b"], ["y"])]
        inits = [numpy_helper.from_array(qweight.t().contiguous().numpy(), "wq"),
                 numpy_helper.from_array(scale.numpy(), "ws"), b, const(1 / 127, "inv127", np.float32),
                 const(1e-12, "eps", np.float32), const(128, "c128", np.float32), const(128, "zp", np.uint8)]
    graph = helper.make_graph(nodes, "linear", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _ort_session(model):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})[0]


def _ort_per_tensor(weight, bias, calib, num_tokens):
    """(f) onnxruntime.quantization.quantize_dynamic of the fp32 graph (per_channel weights):
    DynamicQuantizeLinear (per-tensor uint8) + MatMulInteger, what optimum's avx512_vnni config makes."""
    import tempfile
    from pathlib import Path

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "linear.onnx", Path(folder) / "linear-int8.onnx"
        onnx.save(_onnx_linear(weight, bias, False), source)
        import logging

        logging.getLogger().setLevel(logging.ERROR)  # its "consider pre-processing" warning
        quantize_dynamic(source, target, per_channel=True, weight_type=QuantType.QInt8)
        return _ort_session(onnx.load(target))


def _ort_per_token(weight, bias, calib, num_tokens):
    return _ort_session(_onnx_linear(weight, bias, True))


def _openvino(weight, bias, calib, static: bool, group: int | None):
    """(g) OpenVINO CPU: int8 weight (per channel, decompressed in the graph) and either a
    FakeQuantize on the activations with a static per-tensor range calibrated on other texts (what
    NNCF's post-training quantization makes), or none and the CPU plugin's dynamic quantization
    of activations in groups of `group` along K (group = K: per token)."""
    import openvino as ov
    import openvino.opset13 as ops

    qweight, scale = weight_int8(weight)
    x = ops.parameter([-1, weight.shape[1]], np.float32, name="x")
    source = x
    if static:
        bound = np.float32(calib.abs().max())
        source = ops.fake_quantize(x, -bound, bound, -bound, bound, 256)
    w = ops.multiply(ops.convert(ops.constant(qweight.numpy()), np.float32), ops.constant(scale.numpy()[:, None]))
    y = ops.add(ops.matmul(source, w, False, True), ops.constant(bias.numpy().astype(np.float32)))
    config = {"INFERENCE_NUM_THREADS": torch.get_num_threads(), "PERFORMANCE_HINT": "LATENCY"}
    if group is not None:
        config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = group
    request = ov.Core().compile_model(ov.Model([y], [x]), "CPU", config).create_infer_request()
    return lambda a: request.infer({0: a}, share_inputs=True)[0]


def _fp(dtype):
    def build(weight, bias, calib, num_tokens):
        w, b = weight.to(dtype), bias.to(dtype)
        return lambda x: F.linear(x, w, b)
    return build


WAYS = [
    Way("fp32", "fp32", "-", "F.linear fp32 (MKL)", _fp(torch.float32)),
    Way("bf16", "bf16", "-", "F.linear bf16 (oneDNN)", _fp(torch.bfloat16)),
    Way("int_mm", "bf16", "per-token s8", "torch._int_mm (oneDNN s8s8s32 gemm), eager passes around it",
        lambda w, b, c, m: _eager(IntMM(w, b))),
    Way("int_mm+compile", "bf16", "per-token s8",
        "torch.compile (no freezing): quantize fused in one C++ loop, extern _int_mm, scales+bias+cast fused",
        lambda w, b, c, m: _compiled(IntMM(w, b), _example(m, w.shape[1]), False, None), twin="int_mm"),
    Way("onednn-u8", "bf16", "per-token u8 (zp 128)", "onednn::qlinear_pointwise (brgemm avx512_core_vnni), eager",
        lambda w, b, c, m: _eager(OneDnnU8(w, b))),
    Way("onednn-u8+max-autotune", "bf16", "per-token u8 (zp 128)",
        "torch.compile max-autotune + freezing: inductor's C++ GEMM template, AVX512-VNNI micro-kernel, "
        "token scale, bias and cast in its epilogue",
        lambda w, b, c, m: _compiled(OneDnnU8(w, b), _example(m, w.shape[1]), True, "max-autotune"), twin="onednn-u8"),
    Way("fbgemm-dynamic", "fp32", "per-tensor u8 dynamic", "quantized::linear_dynamic (x86 engine: fbgemm)", _fbgemm),
    Way("torchao+compile", "bf16", "per-token u8 (+128)",
        "torchao Int8DynamicActivationInt8WeightConfig, torch.compile max-autotune + freezing: "
        "fused quantize, extern _int_mm on a transposed weight, fused compensation and scales",
        _torchao, needs="torchao", twin="torchao-eager"),
    Way("torchao-eager", "bf16", "per-token u8 (+128)", "torchao's tensor subclass, eager", _torchao_eager,
        needs="torchao"),
    Way("ort-fp32", "numpy", "-", "ONNX Runtime MatMul fp32 (MLAS)", lambda w, b, c, m: _ort_session(_onnx_linear(w, b, False)),
        needs="onnxruntime"),
    Way("ort-dynamic", "numpy", "per-tensor u8 dynamic", "quantize_dynamic: DynamicQuantizeLinear + MatMulInteger (MLAS)",
        _ort_per_tensor, needs="onnxruntime"),
    Way("ort-per-token", "numpy", "per-token u8 (zp 128)", "hand-built graph: row absmax, MatMulInteger, Mul, Mul, Add",
        _ort_per_token, needs="onnxruntime"),
    Way("openvino-static", "numpy", "per-tensor static (calibrated)", "FakeQuantize + FullyConnected u8 (oneDNN in OpenVINO)",
        lambda w, b, c, m: _openvino(w, b, c, True, None), needs="openvino"),
    Way("openvino-dynamic-token", "numpy", "per-token dynamic (group = K)",
        "int8-compressed weight, CPU plugin's dynamic quantization, DYNAMIC_QUANTIZATION_GROUP_SIZE = K",
        lambda w, b, c, m: _openvino(w, b, c, False, w.shape[1]), needs="openvino"),
    Way("openvino-dynamic-32", "numpy", "dynamic, groups of 32 along K (its default)",
        "int8-compressed weight, CPU plugin's dynamic quantization, default group 32",
        lambda w, b, c, m: _openvino(w, b, c, False, 32), needs="openvino"),
]
