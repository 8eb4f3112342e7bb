"""Model architectures, one file each, keyed by ModelSpec.architecture."""

from engine.models.bert import BertModel
from engine.models.distilbert import DistilBertModel
from engine.models.gemma3 import Gemma3TextModel
from engine.models.mistral import MistralModel
from engine.models.modernbert import ModernBertModel
from engine.models.mpnet import MPNetModel
from engine.models.qwen3 import Qwen3Model

MODEL_CLASSES = {
    "bert": BertModel,
    "distilbert": DistilBertModel,
    "gemma3": Gemma3TextModel,
    "mistral": MistralModel,
    "modernbert": ModernBertModel,
    "mpnet": MPNetModel,
    "qwen3": Qwen3Model,
}
