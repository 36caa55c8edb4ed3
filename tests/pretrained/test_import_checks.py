"""What `import_checkpoint` refuses, and what a broken checkpoint does: one error naming the
setting (or the file and the tensor), and no run directory left behind."""

import json
import sys

import numpy as np
import pytest

from imported_runs import FIXTURES
from keras_transformer import Transformer
from keras_transformer.config import ConfigError
from keras_transformer.pretrained.importer import (
    DownloadError,
    ImportOptions,
    import_checkpoint,
)
from keras_transformer.pretrained.marian import (
    NEW_PAD_LOGIT,
    NEW_PAD_PIECE,
    UnsupportedCheckpointError,
)
from keras_transformer.run_directory import CheckpointError, read_config, read_settings
from marian_checkpoints import EOS, PAD, PIECES, marian_tensors, write_marian_checkpoint
from pipelines.marian_tokenizer import read_vocabulary


def leaves_nothing(output):
    return not output.exists() and not output.with_name(f"partial-{output.name}").exists()


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"decoder_layers": 3}, "decoder_layers=3"),
        ({"decoder_attention_heads": 4}, "decoder_attention_heads=4"),
        ({"decoder_ffn_dim": 64}, "decoder_ffn_dim=64"),
        ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings=False"),
        ({"normalize_before": True}, "normalize_before=True"),
        ({"normalize_embedding": True}, "normalize_embedding=True"),
        ({"static_position_embeddings": False}, "static_position_embeddings=False"),
        ({"add_final_layer_norm": True}, "add_final_layer_norm=True"),
        ({"scale_embedding": False}, "scale_embedding=False"),
        ({"activation_function": "gelu_new"}, "activation_function='gelu_new'"),
        ({"decoder_start_token_id": EOS}, f"decoder_start_token_id={EOS}"),
        ({"decoder_vocab_size": 99}, "decoder_vocab_size=99"),
    ],
)
def test_what_our_config_cannot_represent_is_refused_by_name(tmp_path, changes, named):
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint", changes)
    with pytest.raises(UnsupportedCheckpointError, match=named):
        import_checkpoint(checkpoint, tmp_path / "run")
    assert leaves_nothing(tmp_path / "run")


def test_the_config_and_the_vocabulary_follow_the_checkpoint(tmp_path):
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint", {"activation_function": "relu"})
    config = read_config(import_checkpoint(checkpoint, tmp_path / "run"))
    expected = {
        "num_layers": 2,
        "d_model": 16,
        "num_heads": 2,
        "d_ff": 32,
        "ffn_activation": "relu",
        "sinusoid_layout": "halves",
        "max_length": 512,
        "output_bias": True,
        "tie_embeddings": True,
        "layer_norm_epsilon": 1e-5,
        "residual_dropout": 0.1,
        "vocab_size": len(PIECES) + 1,
    }
    assert {name: getattr(config, name) for name in expected} == expected
    # Our PAD (new), BOS (Marian's <pad>), EOS, UNK, then Marian's order.
    run = tmp_path / "run"
    pieces = [NEW_PAD_PIECE, "<pad>", "</s>", "<unk>", *PIECES[2:PAD]]
    assert read_vocabulary(run / "vocabulary.txt") == pieces
    assert read_settings(run)["source_language"] == "en"
    assert json.loads((run / "vocab.json").read_text())["<pad>"] == PAD


def test_two_vocabularies_are_refused_by_name(tmp_path):
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint")
    (checkpoint / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": True}))
    with pytest.raises(UnsupportedCheckpointError, match="separate_vocabs=True"):
        import_checkpoint(checkpoint, tmp_path / "run")


def test_max_length_may_lower_the_positions_never_raise_them(tmp_path):
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint")
    run = import_checkpoint(checkpoint, tmp_path / "run", ImportOptions(max_length=64))
    assert read_config(run).max_length == 64
    with pytest.raises(UnsupportedCheckpointError, match="max_length=513"):
        import_checkpoint(checkpoint, tmp_path / "longer", ImportOptions(max_length=513))


def test_embedding_rows_and_output_bias_move_with_their_ids(tmp_path):
    tensors = marian_tensors()
    run = import_checkpoint(write_marian_checkpoint(tmp_path / "checkpoint"), tmp_path / "run")
    model = Transformer(read_config(run))
    model.load_weights(run / "model.weights.h5")
    embeddings = model.source_embedding.embeddings.numpy()
    bias = model.source_embedding.logits_bias.numpy()
    marian_ids = [None, PAD, EOS, 1, *range(2, PAD)]
    assert not embeddings[0].any() and bias[0] == NEW_PAD_LOGIT  # the new PAD row: P = 0
    for ours, theirs in enumerate(marian_ids[1:], start=1):
        np.testing.assert_array_equal(embeddings[ours], tensors["model.shared.weight"][theirs])
        assert bias[ours] == tensors["final_logits_bias"][0, theirs]


def test_untied_output_embeddings_are_a_separate_projection(tmp_path):
    """With `lm_head.weight` equal to the shared embedding, the untied import scores as the
    tied one."""
    tensors = marian_tensors(tied=False)
    tensors["lm_head.weight"] = tensors["model.shared.weight"]
    untied = write_marian_checkpoint(tmp_path / "untied", {"tie_word_embeddings": False}, tensors)
    tied_tensors = {name: t for name, t in tensors.items() if name != "lm_head.weight"}
    tied = write_marian_checkpoint(tmp_path / "tied", tensors=tied_tensors)
    inputs = (np.array([[5, 6, 7, 2]]), np.array([[1, 8, 9]]))
    logits = []
    for checkpoint in (tied, untied):
        run = import_checkpoint(checkpoint, tmp_path / f"run-{checkpoint.name}")
        model = Transformer(read_config(run))
        model.load_weights(run / "model.weights.h5")
        logits.append(model(inputs).numpy())
    assert not read_config(tmp_path / "run-untied").tie_embeddings
    np.testing.assert_allclose(logits[1], logits[0], atol=1e-5)


def test_without_final_logits_bias_the_bias_is_zero_but_on_the_new_pad_row(tmp_path):
    """As transformers' Marian, which adds zeros where the bias is missing."""
    tensors = marian_tensors()
    del tensors["final_logits_bias"]
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint", tensors=tensors)
    run = import_checkpoint(checkpoint, tmp_path / "run")
    model = Transformer(read_config(run))
    model.load_weights(run / "model.weights.h5")
    bias = model.source_embedding.logits_bias.numpy()
    assert bias[0] == NEW_PAD_LOGIT and not bias[1:].any()


def test_a_missing_tensor_names_the_file_and_the_tensor(tmp_path):
    tensors = marian_tensors()
    del tensors["model.decoder.layers.1.fc2.bias"]
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint", tensors=tensors)
    with pytest.raises(
        CheckpointError, match=r"model\.safetensors.*model\.decoder\.layers\.1\.fc2\.bias"
    ):
        import_checkpoint(checkpoint, tmp_path / "run")
    assert leaves_nothing(tmp_path / "run")


def test_a_truncated_safetensors_file_names_the_file_and_the_tensor(tmp_path):
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint")
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is truncated: tensor '[\w.]+'"):
        import_checkpoint(checkpoint, tmp_path / "run")
    assert leaves_nothing(tmp_path / "run")


def test_a_tensor_of_another_shape_is_named(tmp_path):
    tensors = marian_tensors()
    tensors["model.encoder.layers.0.fc1.weight"] = np.zeros((7, 16), np.float32)
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint", tensors=tensors)
    with pytest.raises(
        CheckpointError, match=r"'model\.encoder\.layers\.0\.fc1\.weight' has shape \[7, 16\]"
    ):
        import_checkpoint(checkpoint, tmp_path / "run")


def test_an_existing_output_is_never_written_over(tmp_path):
    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="exists"):
        import_checkpoint(checkpoint, tmp_path / "run")
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_a_hub_name_is_downloaded_with_huggingface_hub(tmp_path, monkeypatch, weights):
    """A stand-in for `snapshot_download` serves a repository holding `weights`: the import
    downloads model.safetensors where there is one, else pytorch_model.bin, never both."""
    import huggingface_hub

    repository = FIXTURES / "classic" if weights == "pytorch_model.bin" else None
    repository = repository or write_marian_checkpoint(tmp_path / "hub")
    downloaded = []

    def snapshot_download(repo_id, allow_patterns, **_):
        snapshot = tmp_path / "cache" / repo_id
        snapshot.mkdir(parents=True, exist_ok=True)
        for path in repository.iterdir():
            if path.name in allow_patterns:
                (snapshot / path.name).write_bytes(path.read_bytes())
                downloaded.append(path.name)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    run = import_checkpoint("Helsinki-NLP/opus-mt-en-de", tmp_path / "run")
    assert read_settings(run)["imported_from"] == "Helsinki-NLP/opus-mt-en-de"
    assert weights in downloaded
    assert {"model.safetensors", "pytorch_model.bin"} - {weights} - set(downloaded)


def test_without_huggingface_hub_a_hub_name_says_which_extra_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(DownloadError, match=r"pip install 'keras-transformer\[pretrained\]'"):
        import_checkpoint("Helsinki-NLP/opus-mt-en-de", tmp_path / "run")


def test_a_source_neither_directory_nor_hub_name_is_named(tmp_path):
    with pytest.raises(ConfigError, match="no-such-checkpoint"):
        import_checkpoint(tmp_path / "no-such-checkpoint", tmp_path / "run")


def test_the_command_prints_what_it_wrote_or_one_line_naming_the_refusal(tmp_path, capsys):
    from keras_transformer.cli import main

    checkpoint = write_marian_checkpoint(tmp_path / "checkpoint")
    assert main(["import", str(checkpoint), "--output", str(tmp_path / "run")]) == 0
    assert capsys.readouterr().out == f"imported {checkpoint} into {tmp_path / 'run'}\n"
    refused = write_marian_checkpoint(tmp_path / "pre-norm", {"normalize_before": True})
    with pytest.raises(SystemExit) as stop:
        main(["import", str(refused), "--output", str(tmp_path / "other"), "--max-length", "64"])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("keras-transformer import: error: ") and error.count("\n") == 1
    assert "normalize_before=True (pre-norm residuals)" in error
