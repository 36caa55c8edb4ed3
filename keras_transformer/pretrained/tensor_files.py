"""The tensors of a PyTorch checkpoint file, as numpy arrays, without PyTorch.

Two formats, those Hugging Face checkpoints come in:

- `model.safetensors` (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
  length, a JSON header giving each tensor's dtype, shape and `data_offsets` (begin, end) into
  the byte buffer after it, then that buffer. Read here directly: a truncated file is then an
  error naming the first tensor whose bytes are missing.
- `pytorch_model.bin`: `torch.save`'s zip archive, `<name>/data.pkl` (a pickle of the state dict)
  beside `<name>/data/<key>` (each storage's raw little-endian bytes), or, as torch wrote before
  1.6 and older OPUS-MT uploads hold, its legacy format: pickles of a magic number, a protocol
  version, system information and the state dict, a pickle of the storage keys, then each
  storage's element count (int64) and bytes. The pickles are read by a restricted unpickler
  that knows only how torch rebuilds a tensor from a storage, so unlike `torch.load` it runs no
  other code the file names: a checkpoint from the hub is untrusted data.

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

# The first pickle of a legacy `torch.save` file.
LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
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
    """Tensors by name, read from `path`; a name it lacks is a `CheckpointError` naming both.
    `naming` says in such errors how the names are spelled where not as in the file."""

    def __init__(self, path: Path, tensors: dict[str, np.ndarray], naming=""):
        self.path = path
        self._tensors = tensors
        self.naming = naming

    def __getitem__(self, name) -> np.ndarray:
        if name not in self._tensors:
            raise CheckpointError(
                f"{self.path} holds no tensor {name!r}{self.naming}: the checkpoint is broken"
            )
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
    reader = read_safetensors if path.suffix == ".safetensors" else read_torch_file
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


# -- torch.save's files ------------------------------------------------------------------------


def read_torch_file(path: Path) -> dict[str, np.ndarray]:
    """A state dict saved by `torch.save`: its zip archive (torch 1.6 and later) or its legacy
    format (a sequence of pickles, then the storages' bytes), as older OPUS-MT uploads are."""
    if zipfile.is_zipfile(path):
        return _read_torch_archive(path)
    with open(path, "rb") as file:
        try:
            magic, _protocol, _system = (_TorchUnpickler(file).load() for _ in range(3))
        except Exception:  # other bytes may raise anything unpickling raises (pickle's docs)
            magic = None
        if magic != LEGACY_MAGIC_NUMBER:
            raise CheckpointError(f"{path} is truncated, or neither a torch.save file nor a zip")
        return _read_torch_legacy(path, file)


def _read_torch_archive(path: Path) -> dict[str, np.ndarray]:
    with zipfile.ZipFile(path) as archive:
        pickles = [name for name in archive.namelist() if name.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise CheckpointError(f"{path} holds no data.pkl: not a torch.save archive")
        root = pickles[0][: -len("data.pkl")]

        def storage_bytes(key):
            try:
                return archive.read(f"{root}data/{key}")
            except KeyError as error:
                raise pickle.UnpicklingError(f"storage {root}data/{key} is missing") from error

        try:
            with archive.open(pickles[0]) as file:
                state = _load_state(path, _TorchUnpickler(file, storage_bytes))
        except (zipfile.BadZipFile, EOFError, pickle.UnpicklingError) as error:
            raise CheckpointError(f"{path} is broken: {error}") from error
    return _tensors(state)


def _read_torch_legacy(path: Path, file) -> dict[str, np.ndarray]:
    """After the state dict's pickle: a pickle of the storage keys, then each storage in that
    order, its element count (int64) before its bytes."""
    unpickler = _TorchUnpickler(file)
    try:
        state = _load_state(path, unpickler)
        keys = _TorchUnpickler(file).load()
    except (EOFError, pickle.UnpicklingError) as error:
        raise CheckpointError(f"{path} is broken: {error}") from error
    for key in keys:
        storage = unpickler.storages[key]
        count = file.read(8)
        size = int.from_bytes(count, "little") * storage.dtype.itemsize
        raw = file.read(size)
        if len(count) < 8 or len(raw) < size:
            users = sorted(name for name, view in state.items() if view.storage is storage)
            raise CheckpointError(f"{path} is truncated: the data of tensor {users[0]!r} is cut")
        storage.fill(raw)
    return _tensors(state)


def _load_state(path, unpickler) -> dict:
    state = unpickler.load()
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a state dict")
    return state


def _tensors(state: dict) -> dict[str, np.ndarray]:
    return {name: view.array() for name, view in state.items() if isinstance(view, _TensorView)}


class _TorchUnpickler(pickle.Unpickler):
    """Rebuilds a state dict's tensors as views of storages; any other global the pickle names
    is refused, so no code from the file runs. `storage_bytes(key)` reads a storage as the
    pickle names it (zip archives); without it, storages are filled later (legacy files)."""

    def __init__(self, file, storage_bytes=None):
        super().__init__(file)
        self.storage_bytes = storage_bytes
        self.storages = {}

    def find_class(self, module, name):
        allowed = {
            ("collections", "OrderedDict"): collections.OrderedDict,
            ("torch._utils", "_rebuild_tensor_v2"): _TensorView,
            ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        }
        if (module, name) in allowed:
            return allowed[(module, name)]
        if module == "torch" and name in TORCH_STORAGE_DTYPES:
            return name
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a state dict does not hold")

    def persistent_load(self, saved_id):
        kind, storage_type, key = saved_id[:3]
        view = saved_id[5] if len(saved_id) > 5 else None  # legacy files' views of storages
        if kind != "storage" or storage_type not in TORCH_STORAGE_DTYPES or view is not None:
            raise pickle.UnpicklingError(f"unknown storage {saved_id!r}")
        if key not in self.storages:
            storage = _Storage(storage_type)
            if self.storage_bytes:
                storage.fill(self.storage_bytes(key))
            self.storages[key] = storage
        return self.storages[key]


class _Storage:
    """A torch storage's elements, as numpy computes with them once `fill`ed."""

    def __init__(self, storage_type):
        self.type = storage_type
        self.dtype = _storage_dtype(storage_type, TORCH_STORAGE_DTYPES)
        self.elements = None

    def fill(self, raw: bytes):
        self.elements = _as_array(np.frombuffer(raw, self.dtype), TORCH_STORAGE_DTYPES[self.type])


class _TensorView:
    """`torch._utils._rebuild_tensor_v2(storage, offset, shape, stride, ...)`: a strided view
    of a storage, read once the storage is filled."""

    def __init__(self, storage: _Storage, offset, shape, stride, *_):
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride

    def array(self) -> np.ndarray:
        elements = self.storage.elements
        strides = [step * elements.itemsize for step in self.stride]
        return np.lib.stride_tricks.as_strided(elements[self.offset :], self.shape, strides).copy()


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
