"""A model as Marian itself releases it (tests/fixtures/marian_native/classic: the classic
reference checkpoint in Marian's layout, which CTranslate2's OPUS-MT converter reads as it reads
the Hugging Face checkpoint) imports as that checkpoint does, with Marian's own ε."""

import json
import re
import shutil

import numpy as np
import pytest

from imported_runs import FIXTURES, reference_tensors, to_our_ids
from keras_transformer import Transformer
from keras_transformer.pretrained.importer import import_checkpoint
from keras_transformer.pretrained.marian import UnsupportedCheckpointError
from keras_transformer.run_directory import (
    FINAL_WEIGHTS,
    CheckpointError,
    read_config,
    read_settings,
)
from pipelines.tokenizer import PAD_ID
from repo_paths import REPO_ROOT

RELEASE = REPO_ROOT / "tests" / "fixtures" / "marian_native" / "classic"


def loaded(run):
    model = Transformer(read_config(run))
    model.load_weights(run / FINAL_WEIGHTS)
    return model


def test_a_release_imports_as_its_hugging_face_checkpoint(tmp_path, imported_run):
    release = loaded(import_checkpoint(RELEASE, tmp_path / "release"))
    checkpoint = loaded(imported_run("classic"))
    for ours, theirs in zip(release.weights, checkpoint.weights, strict=True):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)
    pieces = (tmp_path / "release" / "vocabulary.txt").read_text()
    assert pieces == (imported_run("classic") / "vocabulary.txt").read_text()
    marian_ids = json.loads((tmp_path / "release" / "vocab.json").read_text())
    assert marian_ids == json.loads((FIXTURES / "classic" / "vocab.json").read_text())
    assert (release.config.layer_norm_epsilon, release.config.max_length) == (1e-6, 1000)
    # decoder.yml's beam-size, as transformers' converter writes num_beams.
    search = read_settings(tmp_path / "release")["search"]
    assert search == read_settings(imported_run("classic"))["search"]


def test_a_release_scores_as_transformers_within_tolerance(tmp_path):
    """Marian's ε (1e-6) against transformers' (1e-5) moves the logits far less than 1e-4."""
    model = loaded(import_checkpoint(RELEASE, tmp_path / "release"))
    tensors = reference_tensors("classic")
    source_real = tensors["attention_mask"] == 1
    target_real = tensors["decoder_attention_mask"] == 1
    source = np.where(source_real, to_our_ids("classic", tensors["input_ids"]), PAD_ID)
    target_in = np.where(target_real, to_our_ids("classic", tensors["decoder_input_ids"]), PAD_ID)
    columns = to_our_ids("classic", np.arange(tensors["logits"].shape[-1]))
    logits = np.asarray(model((source, target_in)))[..., columns]
    assert np.abs(logits - tensors["logits"])[target_real].max() < 1e-4


@pytest.mark.parametrize(
    "setting, value, named",
    [
        ("transformer-preprocess", "n", "transformer-preprocess='n' (pre-norm residuals)"),
        ("dec-depth", "3", "dec-depth=3 differs from enc-depth"),
        ("tied-embeddings-all", "false", "tied-embeddings-all=False"),
    ],
)
def test_what_transformers_marian_cannot_represent_is_refused_by_marians_name(
    tmp_path, setting, value, named
):
    release = tmp_path / "release"
    shutil.copytree(RELEASE, release)
    with np.load(release / "model.npz") as archive:
        parameters = dict(archive)
    text = parameters["special:model.yml"].tobytes().rstrip(b"\0").decode()
    changed = "\n".join(
        f"{setting}: {value}" if line.startswith(f"{setting}:") else line
        for line in text.split("\n")
    )
    parameters["special:model.yml"] = np.frombuffer(changed.encode() + b"\0", np.int8)
    np.savez(release / "model.npz", **parameters)
    with pytest.raises(UnsupportedCheckpointError, match=re.escape(named)):
        import_checkpoint(release, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_missing_parameter_names_the_file_and_the_tensor(tmp_path):
    release = tmp_path / "release"
    shutil.copytree(RELEASE, release)
    with np.load(release / "model.npz") as archive:
        parameters = {name: archive[name] for name in archive.files if name != "decoder_l2_ffn_b2"}
    np.savez(release / "model.npz", **parameters)
    missing = r"model\.npz holds no tensor 'model\.decoder\.layers\.1\.fc2\.bias' \(as transformers"
    with pytest.raises(CheckpointError, match=missing):
        import_checkpoint(release, tmp_path / "run")
    assert not (tmp_path / "run").exists()
