"""Model architectures, one file each, keyed by ModelSpec.architecture. Runs where ROSE runs: in an
engine process."""

from rose_embed.engine.rose.models.bert import BertModel
from rose_embed.engine.rose.models.clip import ClipModel
from rose_embed.engine.rose.models.distilbert import DistilBertModel
from rose_embed.engine.rose.models.gemma3 import Gemma3TextModel
from rose_embed.engine.rose.models.mistral import MistralModel
from rose_embed.engine.rose.models.modernbert import ModernBertModel
from rose_embed.engine.rose.models.mpnet import MPNetModel
from rose_embed.engine.rose.models.qwen3 import Qwen3Model
from rose_embed.engine.rose.models.siglip import SiglipModel

MODEL_CLASSES = {
    "bert": BertModel,
    "clip": ClipModel,
    "distilbert": DistilBertModel,
    "gemma3": Gemma3TextModel,
    "mistral": MistralModel,
    "modernbert": ModernBertModel,
    "mpnet": MPNetModel,
    "qwen3": Qwen3Model,
    "siglip": SiglipModel,
}
