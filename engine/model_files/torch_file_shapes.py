"""The tensor shapes of a state dict saved by torch.save, read without torch and without running its pickle.

A model's description is read in processes that never import torch (the front ends, the supervisor),
yet a BGE-M3 checkpoint's `colbert_linear.pt` says the size of its token vectors only through its
weight's shape. torch.save's zip format holds the state dict's structure as a pickle (`*/data.pkl`)
and the tensors' bytes beside it; the pickle names a few torch functions and classes, which this
reader replaces by stand-ins that record each tensor's size: no other global is resolved, so a file
that names anything else is refused rather than run.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path


class TorchFileError(ValueError):
    """A file that is not a state dict of tensors saved by torch.save in its zip format."""


def _rebuild_tensor(storage, storage_offset, size, stride, *rest) -> tuple[int, ...]:
    """torch._utils._rebuild_tensor_v2's stand-in: the tensor's shape only."""
    return tuple(int(n) for n in size)


class _Storage:
    """A torch.*Storage class's stand-in; storages are never read."""


# The globals a state dict's pickle names, and what each stands for here.
_GLOBALS = {("collections", "OrderedDict"): OrderedDict, ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
            ("torch._utils", "_rebuild_tensor"): _rebuild_tensor}


class _ShapeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _GLOBALS:
            return _GLOBALS[(module, name)]
        if module == "torch" and name.endswith("Storage"):
            return _Storage
        raise TorchFileError(f"names {module}.{name}, which a state dict of tensors does not")

    def persistent_load(self, pid):
        return None  # a storage's key: the bytes stay where they are


def state_dict_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's name and shape in the state dict `path` holds; TorchFileError naming the file otherwise."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [name for name in archive.namelist() if name.endswith("/data.pkl") or name == "data.pkl"]
            if len(names) != 1:
                raise TorchFileError("holds no data.pkl: torch.save did not write it")
            state = _ShapeUnpickler(io.BytesIO(archive.read(names[0]))).load()
    except zipfile.BadZipFile:
        raise TorchFileError(f"{path} is not in torch.save's zip format (an older torch saved it; load it and save "
                             "it again with torch 1.6 or later)") from None
    except (pickle.UnpicklingError, EOFError, TypeError, AttributeError) as exc:
        raise TorchFileError(f"{path} could not be read as a state dict: {exc}") from None
    except TorchFileError as exc:  # raised without the file's name, which only this knows
        raise TorchFileError(f"{path} {exc}") from None
    if not isinstance(state, dict) or not all(isinstance(v, tuple) for v in state.values()):
        raise TorchFileError(f"{path} is not a state dict (a mapping of names to tensors)")
    return dict(state)
