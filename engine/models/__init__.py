"""Model architectures, one file each, keyed by ModelSpec.architecture."""

from engine.models.bert import BertModel

MODEL_CLASSES = {"bert": BertModel}
