"""Model architectures, one file each, keyed by ModelSpec.architecture."""

from engine.rose.models.bert import BertModel
from engine.rose.models.distilbert import DistilBertModel
from engine.rose.models.gemma3 import Gemma3TextModel
from engine.rose.models.mistral import MistralModel
from engine.rose.models.modernbert import ModernBertModel
from engine.rose.models.mpnet import MPNetModel
from engine.rose.models.qwen3 import Qwen3Model

MODEL_CLASSES = {
    "bert": BertModel,
    "distilbert": DistilBertModel,
    "gemma3": Gemma3TextModel,
    "mistral": MistralModel,
    "modernbert": ModernBertModel,
    "mpnet": MPNetModel,
    "qwen3": Qwen3Model,
}
