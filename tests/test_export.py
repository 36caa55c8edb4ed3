"""The SavedModel export: TF Serving's layout, its signatures, and translations equal to Keras's
beam search when loaded by a process that has none of this project's code."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import cli
from keras_transformer.decoding import beam_decode
from keras_transformer.export import versions
from keras_transformer.translator import load_run
from pipelines.corpus import read_lines

# A process that knows only TensorFlow and tensorflow-text (for its ops), like a deployment.
LOAD_AND_TRANSLATE = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
assert not any(m.startswith(("keras_transformer", "pipelines")) for m in sys.modules)
sentences = json.loads(sys.stdin.read())
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
result = serve(text=tf.constant(sentences))
print(json.dumps({
    "translations": [t.decode("utf-8") for t in result["translations"].numpy()],
    "scores": result["scores"].numpy().tolist(),
}))
"""


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translator's tokenizer)."""


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("saved_models") / "m30k-ende"
    cli.main(["export", "--model", str(run_dir), "--output", str(base)])
    return base


@pytest.fixture(scope="module")
def translator(run_dir):
    return load_run(run_dir)


def test_layout_is_what_tensorflow_serving_loads(exported):
    version = exported / "1"
    assert (version / "saved_model.pb").is_file()
    assert list((version / "variables").glob("variables.index"))
    assert (version / "assets" / "subwords.model").is_file()
    assert [p.name for p in exported.iterdir()] == ["1"]  # no staging directory left behind


def test_a_new_export_takes_the_next_version(exported, run_dir):
    cli.main(["export", "--model", str(run_dir), "--output", str(exported)])
    assert versions(exported) == [1, 2]


def test_saved_model_cli_lists_the_signatures_with_dtypes(exported):
    cli_path = Path(sys.executable).with_name("saved_model_cli")
    shown = subprocess.run(
        [str(cli_path), "show", "--dir", str(exported / "1"), "--all"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    out = shown.stdout
    for signature in ("serving_default", "translate_options", "translate_ids"):
        assert f"signature_def['{signature}']" in out
    serving = out.split("signature_def['serving_default']")[1].split("signature_def[")[0]
    assert "inputs['text'] tensor_info:\n        dtype: DT_STRING" in serving
    assert "outputs['translations'] tensor_info:\n        dtype: DT_STRING" in serving
    assert "outputs['scores'] tensor_info:\n        dtype: DT_FLOAT" in serving


def test_fresh_process_translates_real_sentences_as_keras_does(exported, translator, multi30k_dir):
    sentences = read_lines(multi30k_dir / "test_2016_flickr.en.gz")[:12]
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD_AND_TRANSLATE, str(exported / "1")],
        input=json.dumps(sentences),
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",  # nothing of this checkout on the path
        env={"PATH": os.environ["PATH"], "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    served = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert served["translations"] == translator.translate(sentences, beam_size=4, alpha=0.6)
    assert any(served["translations"])


def test_ids_signature_equals_keras_beam_search(exported, translator):
    module = tf.saved_model.load(str(exported / "1"))
    source = np.array([[40, 41, 42, 2, 0], [43, 2, 0, 0, 0]], np.int32)
    served = module.signatures["translate_ids"](
        source_ids=tf.constant(source),
        beam_size=tf.constant(3),
        alpha=tf.constant(0.6),
        extra_length=tf.constant(5),
    )
    keras_result = beam_decode(translator.model, source, beam_size=3, alpha=0.6, extra_length=5)
    np.testing.assert_array_equal(served["target_ids"].numpy(), keras_result.ids[:, 0].numpy())
    np.testing.assert_allclose(served["scores"], keras_result.scores[:, 0], atol=1e-5)
