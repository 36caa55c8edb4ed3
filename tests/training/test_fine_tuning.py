"""Fine-tuning (`train --init-from RUN`): a run starts from an imported model's weights, with its
model settings and tokenizer files, a fresh optimizer at step 0 and the constant learning rate of
fine-tuning; `prepare --tokenizer-from RUN` tokenizes a corpus for it."""

import json
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, cli
from keras_transformer.objectives.losses import LabelSmoothedCrossEntropy
from keras_transformer.run_directory import read_config, read_settings, save_weights_atomically
from keras_transformer.training.trainer import compile_model, with_known_length
from pipelines import MarianTokenizer, corpus_files, make_translation_dataset
from pipelines.batching import BatchingSettings
from pipelines.corpus import read_lines
from pipelines.prepared import read_manifest
from pipelines.tokenizer import EOS_ID

FINE_TUNING = ["--learning-rate-schedule", "constant", "--bleu-every", "0"]


@pytest.fixture
def imported(imported_run):
    """The classic reference checkpoint (swish, `</s>` id 0, trained on Multi30k), imported."""
    return imported_run("classic")


def held_out_loss(run, weights, data_dir) -> float:
    """The mean token cross-entropy of `weights` on the test pairs of `data_dir`, which no run
    trained on."""
    model = Transformer(read_config(run))
    model.load_weights(weights)
    model.compile(loss=LabelSmoothedCrossEntropy(0.0))
    files = corpus_files("multi30k", data_dir, "en", "de")
    batches = make_translation_dataset(
        *files["test_2016_flickr"], MarianTokenizer(run), BatchingSettings(1024, 64)
    )
    return float(model.evaluate(with_known_length(batches), verbose=0))


@pytest.mark.slow  # trains through the CLI
def test_fine_tuning_lowers_the_in_domain_loss_of_held_out_pairs(tmp_path, imported, dog_captions):
    """The imported model, trained on all of Multi30k, fine-tuned on its captions of dogs:
    held-out captions of dogs score better."""
    run = tmp_path / "fine-tuned"
    command = ["train", "--init-from", str(imported), "--data-dir", str(dog_captions)]
    steps = ["--max-steps", "40", "--learning-rate", "1e-3", "--learning-rate-warmup", "5"]
    steps += ["--batch-tokens", "2048"]
    assert cli.main([*command, "--output", str(run), *FINE_TUNING, *steps]) == 0

    assert read_config(run) == read_config(imported).replace(batch_tokens=2048)
    for name in ("source.spm", "target.spm", "vocabulary.txt", "vocab.json"):
        assert (run / name).read_bytes() == (imported / name).read_bytes()
    settings = read_settings(run)
    assert settings["init_from"] == str(imported)
    assert (settings["learning_rate_schedule"], settings["learning_rate"]) == ("constant", 1e-3)
    before = held_out_loss(imported, imported / "model.weights.h5", dog_captions)
    after = held_out_loss(run, run / "model.weights.h5", dog_captions)
    assert after < before - 0.08, (before, after)


def weights_of(run, name="model.weights.h5") -> list[np.ndarray]:
    model = Transformer(read_config(run))
    model.load_weights(run / name)
    return model.get_weights()


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "change, named",
    [
        (["--set", "d_model=128"], "'d_model': (64, 128)"),
        (["--preset", "tiny"], "'vocab_size': "),
        (["--set", "ffn_activation=relu"], "'ffn_activation': ('swish', 'relu')"),
    ],
)
def test_a_conflicting_architecture_is_refused_by_name(tmp_path, imported, change, named):
    run = tmp_path / "run"
    with pytest.raises(SystemExit, match=f"holds a model of other settings .*{re.escape(named)}"):
        cli.main(["train", "--init-from", str(imported), "--output", str(run), *change])
    assert not run.exists()


@pytest.mark.slow
def test_a_prepared_corpus_of_the_imported_tokenizers_fine_tunes_it_from_step_0(
    tmp_path, imported, first_lines_data
):
    """`prepare --tokenizer-from` tokenizes as the imported run does; a run fine-tuned on it
    counts its own updates from 0 and resumes from its own backup. One training proves both, as
    each would trace the imported model's steps again."""
    prepared, run = tmp_path / "prepared", tmp_path / "run"
    corpus = ["--dataset", "multi30k", "--data-dir", str(first_lines_data)]
    tokenizer_from = ["--tokenizer-from", str(imported)]
    assert cli.main(["prepare", *corpus, *tokenizer_from, "--output", str(prepared)]) == 0
    vocabulary = read_manifest(prepared)["vocabulary"]
    assert (vocabulary["kind"], vocabulary["file"]) == ("marian", "vocabulary.txt")
    assert sorted(entry["file"] for entry in vocabulary["models"].values()) == [
        "source.spm",
        "target.spm",
    ]
    tokenizer = MarianTokenizer(imported)
    record = next(
        iter(tf.data.TFRecordDataset(str(prepared / "validation-00000-of-00001.tfrecord")))
    )
    example = tf.train.Example.FromString(record.numpy()).features.feature
    files = corpus_files("multi30k", first_lines_data, "en", "de")["validation"]
    first_pair = [read_lines(path)[0] for path in files]
    assert list(example["source"].int64_list.value) == [
        *tokenizer.tokenize(tf.constant(first_pair[:1])).to_list()[0],
        EOS_ID,
    ]
    assert list(example["target"].int64_list.value) == [
        *tokenizer.tokenize_target(tf.constant(first_pair[1:])).to_list()[0],
        EOS_ID,
    ]

    # A trained run, whose optimizer counted 7 updates: the new run counts its own from 0.
    trained = tmp_path / "trained"
    shutil.copytree(imported, trained)
    model = compile_model(read_config(trained))
    model.optimizer.iterations.assign(7)
    save_weights_atomically(model, trained / "model.weights.h5")
    train = ["train", "--data", str(prepared), *FINE_TUNING, "--max-steps", "2"]
    command = [*train, "--init-from", str(trained), "--output", str(run), "--log-every", "1"]
    assert cli.main(command) == 0
    assert (run / "vocabulary.txt").read_bytes() == (imported / "vocabulary.txt").read_bytes()
    assert [r["step"] for r in metrics(run) if r["kind"] == "start"] == [0]
    assert max(r["step"] for r in metrics(run)) == 2
    fine_tuned = weights_of(run)
    assert any(
        not np.array_equal(a, b) for a, b in zip(fine_tuned, weights_of(trained), strict=True)
    )

    # The rerun resumes from the run's own backup, not from init_from's weights.
    assert cli.main(command) == 0
    for resumed, saved in zip(weights_of(run), fine_tuned, strict=True):
        np.testing.assert_array_equal(resumed, saved)

    # A run whose vocabulary differs from the prepared one is refused, naming the file.
    other = tmp_path / "other-import"
    shutil.copytree(imported, other)
    pieces = (other / "vocabulary.txt").read_text(encoding="utf-8").splitlines()
    pieces[4], pieces[5] = pieces[5], pieces[4]
    (other / "vocabulary.txt").write_text("\n".join(pieces) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"vocabulary\.txt is not .*prepared"):
        cli.main([*train, "--init-from", str(other), "--output", str(tmp_path / "refused")])
