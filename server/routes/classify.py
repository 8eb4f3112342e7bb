"""POST /classify (vLLM's) and POST /predict (TEI's): a classifier's labels through the request pipeline.

The wire is compat/classify.py's; the ask (server/pipeline/classify_ask.py) makes each text or pair
of texts one sequence, which the same queue and engine as embeddings compute; the engine hands
back each input's probabilities then its raw logits. Over-long inputs: /classify cuts them at the
model's limit unless the server runs --long-inputs error (then OpenAI's context-length 400);
/predict refuses them unless `truncate` is true, as TEI does.
"""

from __future__ import annotations

import time
import uuid

import numpy as np
from litestar import Request
from litestar.datastructures import State

from rose_embed.compat.classify import (ClassificationData, ClassifyRequest, ClassifyResponse, ClassifyUsage,
                                        Prediction, PredictRequest, classify_inputs_of, is_predict_batch,
                                        predict_inputs_of, uses_activation)
from rose_embed.compat.tei_embed import check_truncation_direction
from rose_embed.server.config import ServerConfig
from rose_embed.server.http.errors import APIError, invalid_request
from rose_embed.server.http.openapi import EMBEDDINGS_ERROR_RESPONSES
from rose_embed.server.http.route_spec import RouteSpec
from rose_embed.server.pipeline.classify_ask import ClassifyAsk
from rose_embed.server.pipeline.long_inputs import context_length_error
from rose_embed.server.pipeline.serve_request import Answered, RouteSteps, serve_request
from rose_embed.server.pipeline.served_models import ServedModel


def _labels(done: Answered) -> tuple[str, ...]:
    return done.model.view.spec.classifier.labels


def _scores(done: Answered, use_activation: bool) -> np.ndarray:
    """[N, num_labels]: each input's probabilities, or its raw logits."""
    num_labels = len(_labels(done))
    return done.result[:, :num_labels] if use_activation else done.result[:, num_labels:]


def _read_classify(data: ClassifyRequest, model: ServedModel, config: ServerConfig) -> ClassifyAsk:
    texts = classify_inputs_of(data, config.max_request_inputs)
    return ClassifyAsk(texts, "input", cut_long=config.long_inputs != "error", too_long=context_length_error,
                       pair_too_long=_pair_too_long, priority=data.priority)


def _answer_classify(done: Answered) -> ClassifyResponse:
    labels, scores = _labels(done), _scores(done, uses_activation(done.data))
    data = [ClassificationData(index=i, label=labels[int(np.argmax(row))], probs=row.tolist(), num_classes=len(row))
            for i, row in enumerate(scores)]
    return ClassifyResponse(id=f"classify-{uuid.uuid4().hex}", created=int(time.time()), model=done.model.name,
                            data=data, usage=ClassifyUsage(prompt_tokens=done.num_tokens, total_tokens=done.num_tokens))


def _read_predict(data: PredictRequest, model: ServedModel, config: ServerConfig) -> ClassifyAsk:
    inputs = predict_inputs_of(data.inputs, config.max_request_inputs)
    check_truncation_direction(data.truncation_direction)
    return ClassifyAsk(inputs, "inputs", cut_long=bool(data.truncate), too_long=_text_too_long,
                       pair_too_long=_pair_too_long)


def _answer_predict(done: Answered) -> list[Prediction] | list[list[Prediction]]:
    labels, scores = _labels(done), _scores(done, not done.data.raw_scores)
    answers = [[Prediction(score=row[i], label=labels[i]) for i in sorted(range(len(row)), key=lambda i: -row[i])]
               for row in scores.tolist()]
    return answers if is_predict_batch(done.data.inputs) else answers[0]


def _text_too_long(max_len: int, num_tokens: int) -> APIError:
    return invalid_request(f"An input of 'inputs' holds {num_tokens} tokens, more than this model's limit of "
                           f"{max_len}; send \"truncate\": true to have its end cut, as TEI asks", "inputs",
                           "context_length_exceeded")


def _pair_too_long(index: int) -> APIError:
    return invalid_request(f"the pair 'inputs[{index}]' is longer than the model's limit; send \"truncate\": true to "
                           "have it cut, as TEI asks", "inputs", "context_length_exceeded")


CLASSIFY = RouteSteps(ClassifyRequest, "classify", _read_classify, _answer_classify)
PREDICT = RouteSteps(PredictRequest, "classify", _read_predict, _answer_predict)


async def classify(request: Request, state: State) -> ClassifyResponse:
    return await serve_request(request, state, CLASSIFY)


async def predict(request: Request, state: State) -> list[Prediction] | list[list[Prediction]]:
    return await serve_request(request, state, PREDICT)


ROUTES = [
    RouteSpec(classify, "POST", ("/classify", "/v1/classify"), "Classify texts (vLLM's classify)",
              EMBEDDINGS_ERROR_RESPONSES, body=ClassifyRequest),
    RouteSpec(predict, "POST", ("/predict",), "Classify texts and pairs of texts (Hugging Face TEI's predict)",
              EMBEDDINGS_ERROR_RESPONSES, body=PredictRequest),
]
