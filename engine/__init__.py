"""ROSE: the in-process embedding engine (tensors and token ids only, never HTTP)."""
