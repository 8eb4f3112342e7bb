"""Model architectures, one file each, keyed by ModelSpec.architecture."""

from engine.models.bert import BertModel
from engine.models.qwen3 import Qwen3Model

MODEL_CLASSES = {"bert": BertModel, "qwen3": Qwen3Model}
