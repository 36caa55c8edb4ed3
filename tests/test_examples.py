"""The examples run as a user would run them: examples/train_with_fit.py trains with `model.fit`
on Multi30k and exports a SavedModel that TensorFlow Serving can load;
examples/finetune_opus_mt.py fine-tunes an imported model with `model.fit` into a run directory
that translates."""

import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf

from repo_paths import REPO_ROOT


def run_example(script, *arguments) -> subprocess.CompletedProcess:
    """Runs examples/`script` with `arguments` as a user would, from the checkout; it must
    succeed."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    command = [sys.executable, f"examples/{script}", *arguments]
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_train_with_fit_trains_exports_and_translates(tmp_path, multi30k_slice):
    export = tmp_path / "export"
    done = run_example(
        "train_with_fit.py",
        *("--preset", "tiny", "--steps", "3", "--epochs", "1"),
        *("--data-dir", str(multi30k_slice), "--output", str(export)),
    )
    assert (export / "1" / "saved_model.pb").is_file()
    assert f"exported {export / '1'}" in done.stdout

    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)

    serve = tf.saved_model.load(str(export / "1")).signatures["serving_default"]
    outputs = serve(text=tf.constant(["A dog runs on the beach."]))
    translations = outputs["translations"]
    assert translations.dtype == tf.string and translations.shape == (1,)
    assert isinstance(translations.numpy()[0].decode("utf-8"), str)


@pytest.mark.long(
    covered_by=[
        "tests/training/test_fine_tuning.py::test_fine_tuning_lowers_the_in_domain_loss_of_held_out_pairs",
    ]
)
@pytest.mark.slow
def test_finetune_opus_mt_fine_tunes_an_imported_run_into_one_that_translates(
    tmp_path, imported_run, dog_captions
):
    from keras_transformer.decoding.translator import load_run

    imported, output = imported_run("classic"), tmp_path / "fine-tuned"
    done = run_example(
        "finetune_opus_mt.py",
        *("--model", str(imported), "--output", str(output)),
        *("--data-dir", str(dog_captions), "--steps", "20", "--epochs", "1"),
        *("--learning-rate", "1e-3", "--warmup", "5", "--batch-tokens", "2048"),
    )
    losses = re.search(r"validation loss: (\S+) before, (\S+) after", done.stdout)
    assert float(losses[2]) < float(losses[1]), done.stdout
    for name in ("config.json", "run.json", "source.spm", "target.spm", "vocabulary.txt"):
        assert (output / name).read_bytes() == (imported / name).read_bytes()

    translator = load_run(output)
    assert translator.tokenizer.kind == "marian"
    sentence = "A man in a blue shirt is riding a bicycle down the street."
    translation = translator.translate([sentence])[0]  # as the script translates it
    assert f"{sentence} -> {translation}" in done.stdout
