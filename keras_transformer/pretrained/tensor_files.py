"""The tensors of a PyTorch checkpoint file, as numpy arrays, without PyTorch.

Two formats, those Hugging Face checkpoints come in:

- `model.safetensors` (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
  length, a JSON header giving each tensor's dtype, shape and `data_offsets` (begin, end) into
  the byte buffer after it, then that buffer. Read here directly: a truncated file is then an
  error naming the first tensor whose bytes are missing.
- `pytorch_model.bin`: `torch.save`'s zip archive, `<name>/data.pkl` (a pickle of the state dict)
  beside `<name>/data/<key>` (each storage's raw little-endian bytes). The pickle is read by a
  restricted unpickler that knows only how torch rebuilds a tensor from a storage, so unlike
  `torch.load` it runs no other code the file names: a checkpoint from the hub is untrusted data.

`read_tensors(path)` returns a `CheckpointTensors`, a mapping from tensor names to float32 (or
integer) arrays whose missing names are errors naming the file.
"""

from __future__ import annotations

import collections
import json
import pickle
import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from keras_transformer.run_directory import CheckpointError

SAFETENSORS_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": "bfloat16",
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
# `torch.<Name>Storage`, as the pickle of a typed storage names its element type.
TORCH_STORAGE_DTYPES = {
    "DoubleStorage": np.float64,
    "FloatStorage": np.float32,
    "HalfStorage": np.float16,
    "BFloat16Storage": "bfloat16",
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class CheckpointTensors(Mapping):
    """Tensors by name, read from `path`; a name it lacks is a `CheckpointError` naming both."""

    def __init__(self, path: Path, tensors: dict[str, np.ndarray]):
        self.path = path
        self._tensors = tensors

    def __getitem__(self, name) -> np.ndarray:
        if name not in self._tensors:
            raise CheckpointError(f"{self.path} holds no tensor {name!r}: the checkpoint is broken")
        return self._tensors[name]

    def __contains__(self, name):
        return name in self._tensors

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self):
        return len(self._tensors)


def read_tensors(path) -> CheckpointTensors:
    """The tensors of a `.safetensors` file or of a `torch.save` zip archive (`.bin`, `.pt`)."""
    path = Path(path)
    reader = read_safetensors if path.suffix == ".safetensors" else read_torch_archive
    try:
        return CheckpointTensors(path, reader(path))
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror or error}") from error


# -- safetensors ----------------------------------------------------------------------------


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    if path.stat().st_size < 8:
        raise CheckpointError(f"{path} is truncated: it lacks even the safetensors header length")
    data = np.memmap(path, dtype=np.uint8, mode="r")  # each tensor is copied out of it
    (header_length,) = struct.unpack("<Q", data[:8].tobytes())
    try:
        header = json.loads(data[8 : 8 + header_length].tobytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(
            f"{path} is not a safetensors file (or is truncated): {error}"
        ) from error
    buffer = data[8 + header_length :]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        if end > len(buffer):
            raise CheckpointError(
                f"{path} is truncated: tensor {name!r} needs bytes {begin}-{end} of the data, "
                f"which holds {len(buffer)}"
            )
        if entry["dtype"] not in SAFETENSORS_DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r} has unknown dtype {entry['dtype']}")
        raw = buffer[begin:end].view(_storage_dtype(entry["dtype"], SAFETENSORS_DTYPES))
        tensors[name] = _as_array(raw, SAFETENSORS_DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return tensors


# -- torch.save's zip archive -----------------------------------------------------------------


def read_torch_archive(path: Path) -> dict[str, np.ndarray]:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as error:
        raise CheckpointError(
            f"{path} is truncated or not a torch.save zip archive ({error}); torch's legacy "
            "format is not read: use the checkpoint's model.safetensors"
        ) from error
    with archive:
        pickles = [name for name in archive.namelist() if name.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise CheckpointError(f"{path} holds no data.pkl: not a torch.save archive")
        root = pickles[0][: -len("data.pkl")]
        try:
            state = _TorchUnpickler(archive, root, path).load_pickle(pickles[0])
        except (zipfile.BadZipFile, EOFError, pickle.UnpicklingError) as error:
            raise CheckpointError(f"{path} is broken: {error}") from error
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a state dict")
    return dict(state)


class _TorchUnpickler(pickle.Unpickler):
    """Rebuilds a state dict's tensors as numpy arrays; any other global the pickle names is
    refused, so no code from the file runs."""

    def __init__(self, archive: zipfile.ZipFile, root: str, path: Path):
        self.archive, self.root, self.path = archive, root, path
        self.storages = {}

    def load_pickle(self, name):
        with self.archive.open(name) as file:
            super().__init__(file)
            return self.load()

    def find_class(self, module, name):
        allowed = {
            ("collections", "OrderedDict"): collections.OrderedDict,
            ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
            ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        }
        if (module, name) in allowed:
            return allowed[(module, name)]
        if module == "torch" and name in TORCH_STORAGE_DTYPES:
            return name
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a state dict does not hold")

    def persistent_load(self, saved_id):
        kind, storage_type, key, _location, _numel = saved_id
        if kind != "storage" or storage_type not in TORCH_STORAGE_DTYPES:
            raise pickle.UnpicklingError(f"unknown storage {saved_id!r}")
        if key not in self.storages:
            member = f"{self.root}data/{key}"
            try:
                raw = self.archive.read(member)
            except KeyError as error:
                raise pickle.UnpicklingError(f"storage {member} is missing") from error
            dtype = TORCH_STORAGE_DTYPES[storage_type]
            self.storages[key] = _as_array(
                np.frombuffer(raw, _storage_dtype(storage_type, TORCH_STORAGE_DTYPES)), dtype
            )
        return self.storages[key]


def _rebuild_tensor(storage, offset, shape, stride, *_):
    """`torch._utils._rebuild_tensor_v2`: a strided view of a storage, copied."""
    strides = [step * storage.itemsize for step in stride]
    return np.lib.stride_tricks.as_strided(storage[offset:], shape, strides).copy()


def _rebuild_parameter(data, *_):
    """`torch._utils._rebuild_parameter`: a `Parameter`'s data is its tensor."""
    return data


def _storage_dtype(name, dtypes):
    """The little-endian dtype the raw bytes are read as (bfloat16: as uint16)."""
    dtype = dtypes[name]
    return np.dtype("<u2") if dtype == "bfloat16" else np.dtype(dtype).newbyteorder("<")


def _as_array(raw: np.ndarray, dtype) -> np.ndarray:
    """Raw elements as an array numpy computes with: bfloat16 widened to float32 (its upper
    16 bits), everything else in the machine's byte order."""
    if dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.dtype(dtype))
