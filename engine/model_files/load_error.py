"""The one error a model's files raise when they cannot be served: it says which file and why."""


class ModelLoadError(RuntimeError):
    """The model could not be found or is not one this engine can run."""
