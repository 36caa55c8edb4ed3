"""`read_tensors` against files written by the safetensors library and by torch.save (the
reference checkpoint's zip archive; tests/fixtures/torch, its legacy format), broken files, and
a pickle that would run code."""

import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest
from safetensors.numpy import save_file

from keras_transformer.pretrained.tensor_files import read_tensors
from keras_transformer.run_directory import CheckpointError
from repo_paths import REPO_ROOT

CLASSIC = REPO_ROOT / "tests" / "fixtures" / "marian" / "classic"
LEGACY = REPO_ROOT / "tests" / "fixtures" / "torch"


def test_safetensors_tensors_come_back_as_written(tmp_path):
    written = {
        "weight": np.arange(12, dtype=np.float32).reshape(3, 4),
        "half": np.array([0.5, -2.0], np.float16),
        "ids": np.array([[7, 8]], np.int64),
    }
    save_file(written, str(tmp_path / "model.safetensors"))
    tensors = read_tensors(tmp_path / "model.safetensors")
    assert sorted(tensors) == sorted(written)
    for name, array in written.items():
        assert tensors[name].dtype == array.dtype
        np.testing.assert_array_equal(tensors[name], array)


def test_a_missing_tensor_is_named_with_its_file(tmp_path):
    save_file({"a": np.zeros(2, np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors holds no tensor 'b'"):
        read_tensors(tmp_path / "model.safetensors")["b"]


def test_a_torch_archive_is_read_as_torch_wrote_it():
    """The classic reference checkpoint's pytorch_model.bin, written by torch.save."""
    tensors = read_tensors(CLASSIC / "pytorch_model.bin")
    shared = tensors["model.shared.weight"]
    assert shared.dtype == np.float32 and shared.ndim == 2
    assert tensors["final_logits_bias"].shape == (1, shared.shape[0])
    assert np.isfinite(shared).all() and shared.std() > 0


def test_a_truncated_torch_archive_names_the_file(tmp_path):
    truncated = tmp_path / "pytorch_model.bin"
    truncated.write_bytes((CLASSIC / "pytorch_model.bin").read_bytes()[:-5000])
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin is truncated"):
        read_tensors(truncated)


def test_a_legacy_torch_file_is_read_as_torch_reads_it():
    """Float32, float16, bfloat16 (widened to float32), int64, a parameter, and a strided view
    of another tensor's storage."""
    expected = json.loads((LEGACY / "expected.json").read_text())
    tensors = read_tensors(LEGACY / "legacy.bin")
    assert sorted(tensors) == sorted(expected)
    for name, tensor in expected.items():
        np.testing.assert_array_equal(tensors[name].astype(np.float32), tensor["values"])
    assert tensors["half"].dtype == np.float16 and tensors["ids"].dtype == np.int64


def test_a_truncated_legacy_torch_file_names_the_file_and_a_tensor(tmp_path):
    truncated = tmp_path / "pytorch_model.bin"
    truncated.write_bytes((LEGACY / "legacy.bin").read_bytes()[:-10])
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin is truncated: .*tensor '\w+'"):
        read_tensors(truncated)


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def test_a_pickle_naming_other_code_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("archive/data.pkl", pickle.dumps({"weight": RunsCode(marker)}))
    (tmp_path / "pytorch_model.bin").write_bytes(archive.getvalue())
    with pytest.raises(CheckpointError, match=r"names posix\.mkdir"):
        read_tensors(tmp_path / "pytorch_model.bin")
    assert not marker.exists()
