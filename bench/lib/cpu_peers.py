"""sentence-transformers and its CPU backends, each run in this process: the peers of
bench/cpu_compare.py, which starts this file in their own environment and drives it.

sentence-transformers' `backend="onnx"` and `backend="openvino"` need optimum-onnx or
optimum-intel, which pin transformers < 4.58 and so cannot install beside
sentence-transformers 6 / transformers 5. ONNX Runtime, OpenVINO and NNCF themselves can
(bench/results/cpu/README.md). So each backend here is what sentence-transformers' would be, built
without optimum: the model's BertModel exported to ONNX once (torch's TorchScript exporter,
batch and sequence dynamic), run by ONNX Runtime or OpenVINO in place of the torch module
inside an unchanged SentenceTransformer. Tokenization, length sorting, batches of 32,
padding, mean pooling and normalization stay sentence-transformers' own.

- st-fp32: SentenceTransformer.encode, float32 (the reference)
- st-bf16-autocast: the same under torch.autocast("cpu", bfloat16)
- ort-fp32: ONNX Runtime, the exported graph
- ort-int8: ONNX Runtime after onnxruntime.quantization.quantize_dynamic of the MatMuls (int8
  weights per channel, uint8 activations with one dynamic scale per tensor)
- openvino: OpenVINO with its defaults (PERFORMANCE_HINT LATENCY, as optimum-intel sets):
  bf16 inference precision where the CPU computes bf16
- openvino-int8: the OpenVINO model after nncf.quantize (static, ModelType.TRANSFORMER),
  calibrated on texts other than those embedded

Protocol: one JSON object per line on stdin, one per line on stdout (everything the libraries
print goes to stderr):
    {"op": "load", "model": DIR, "texts": FILE.json, "systems": [...]}
        -> {"loaded": {system: description, "versions": "torch 2.13.0, ..."}}
    {"op": "encode", "system": S, "set": "passages" | "queries", "out": FILE.npy} -> {"seconds": s}
FILE.json holds {"passages": [...], "queries": [...], "calibration": [...]}.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

BATCH_SIZE = 32
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Runtime(torch.nn.Module):
    """Stands where sentence-transformers keeps its transformers model: takes its tensors, runs
    `infer` (numpy in, last hidden state [B, S, H] float32 numpy out) and answers as the model would."""

    def __init__(self, config, infer):
        super().__init__()
        self.config, self.infer = config, infer

    def forward(self, input_ids, attention_mask, token_type_ids=None, **_):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        return {"last_hidden_state": torch.from_numpy(self.infer({k: v.numpy() for k, v in feeds.items()}))}


class _LastHiddenState(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                         token_type_ids=token_type_ids).last_hidden_state


def export_onnx(st, path: Path) -> None:
    bert = st[0].model.eval()
    example = st.tokenize(["an example", "and a longer example text"])
    dynamic = {name: {0: "batch", 1: "sequence"} for name in (*INPUTS, "last_hidden_state")}
    torch.onnx.export(_LastHiddenState(bert), tuple(example[k] for k in INPUTS), str(path), input_names=list(INPUTS),
                      output_names=["last_hidden_state"], dynamic_axes=dynamic, opset_version=17, dynamo=False)


def ort_infer(path: Path):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)[0]


def openvino_model(path: Path):
    import openvino as ov

    return ov.convert_model(str(path))


def openvino_infer(model):
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()

    def infer(feeds):
        request.infer(feeds)
        return request.get_output_tensor(0).data.copy()
    infer.precision = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    return infer


class Peers:
    def __init__(self, model: str, texts: dict[str, list[str]], systems: list[str]):
        from sentence_transformers import SentenceTransformer

        self.texts, self.models, self.describe = texts, {}, {}
        self.folder = Path(tempfile.mkdtemp(prefix="cpu-peers-"))
        onnx_path = self.folder / "model.onnx"
        for name in systems:
            st = SentenceTransformer(model, device="cpu")
            if name in ("ort-fp32", "ort-int8", "openvino", "openvino-int8") and not onnx_path.exists():
                export_onnx(st, onnx_path)
            config = st[0].model.config
            if name == "st-fp32":
                self.describe[name] = f"sentence-transformers encode(batch_size={BATCH_SIZE}), float32"
            elif name == "st-bf16-autocast":
                self.describe[name] = "sentence-transformers under torch.autocast('cpu', torch.bfloat16)"
            elif name == "ort-fp32":
                st[0].model = Runtime(config, ort_infer(onnx_path))
                self.describe[name] = "ONNX Runtime, CPUExecutionProvider, float32"
            elif name == "ort-int8":
                from onnxruntime.quantization import QuantType, quantize_dynamic

                quantized = self.folder / "model-int8.onnx"
                # Weights per output channel: one scale per matrix cost 0.03 of mean cosine here.
                quantize_dynamic(str(onnx_path), str(quantized), weight_type=QuantType.QInt8, per_channel=True,
                                 op_types_to_quantize=["MatMul"])
                st[0].model = Runtime(config, ort_infer(quantized))
                self.describe[name] = "ONNX Runtime quantize_dynamic (MatMul: int8 weights per channel, " \
                                      "uint8 activations with a dynamic scale per tensor)"
            elif name == "openvino":
                infer = openvino_infer(openvino_model(onnx_path))
                st[0].model = Runtime(config, infer)
                self.describe[name] = f"OpenVINO defaults, inference precision {infer.precision}"
            elif name == "openvino-int8":
                infer = openvino_infer(self._nncf(st, openvino_model(onnx_path)))
                st[0].model = Runtime(config, infer)
                self.describe[name] = f"OpenVINO after nncf.quantize (static, transformer preset, " \
                                      f"{len(texts['calibration'])} calibration texts), rest in {infer.precision}"
            else:
                raise ValueError(f"unknown system {name!r}")
            self.models[name] = st
            self.encode(name, texts["passages"])  # warm-up on exactly the timed shapes

    def _nncf(self, st, model):
        import nncf

        calibration = self.texts["calibration"]
        batches = [{k: v.numpy() for k, v in st.tokenize(calibration[i:i + BATCH_SIZE]).items() if k in INPUTS}
                   for i in range(0, len(calibration), BATCH_SIZE)]
        return nncf.quantize(model, nncf.Dataset(batches), model_type=nncf.ModelType.TRANSFORMER,
                             subset_size=len(batches))

    def encode(self, name: str, texts: list[str]) -> np.ndarray:
        st = self.models[name]
        if name == "st-bf16-autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return st.encode(texts, batch_size=BATCH_SIZE, convert_to_numpy=True).astype(np.float32)
        return st.encode(texts, batch_size=BATCH_SIZE, convert_to_numpy=True).astype(np.float32)


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    names = ("torch", "sentence-transformers", "transformers", "onnxruntime", "openvino", "nncf")
    found = []
    for name in names:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found)


def main() -> None:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # libraries' prints must not mix with the replies
    peers = None
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "load":
            texts = json.loads(Path(request["texts"]).read_text())
            peers = Peers(request["model"], texts, request["systems"])
            reply = {"loaded": {**peers.describe, "versions": versions()}}
        else:
            start = time.perf_counter()
            vectors = peers.encode(request["system"], peers.texts[request["set"]])
            reply = {"seconds": time.perf_counter() - start}
            np.save(request["out"], vectors)
        replies.write(json.dumps(reply) + "\n")
    if peers is not None:
        shutil.rmtree(peers.folder, ignore_errors=True)


if __name__ == "__main__":
    main()
