"""The int8 path of the README: `export --format tflite [--quantize dynamic] --output BASE` writes
a version a server loads, `serve` answers it through LiteRT, and `translate --model x.tflite`
translates with it; each as the Keras `Translator` (float32) or the TFLite model itself (int8)
translates."""

import base64
import logging
import sys
import urllib.parse

import numpy as np
import pytest

from keras_transformer import cli
from keras_transformer.decoding.translator import load_run
from keras_transformer.export.layout import MODEL_INFO, TFLITE_MODEL
from keras_transformer.export.mapped_pages import resident_bytes
from keras_transformer.export.tflite import int8_lookups
from keras_transformer.export.tflite_translator import TFLiteTranslator
from keras_transformer.keras_internals import sublayers
from keras_transformer.layers.embeddings import SharedEmbedding
from keras_transformer.server.apis.libretranslate import LibreTranslate, LibreTranslateSettings
from keras_transformer.server.models.lifecycle import ServedModel
from keras_transformer.server.models.model_config import Specific
from keras_transformer.server.models.model_manager import ModelManager
from keras_transformer.server.server import ModelServer
from serving_clients import http, predict_outputs, server_settings

pytestmark = pytest.mark.slow  # converts to TFLite

SOURCE_LENGTH, EXTRA_LENGTH = 16, 6
SENTENCES = ["A dog runs on the beach.", "Two men play football in a park.", "A woman reads."]
LONG = "A man in a blue shirt and a red hat stands next to a large white dog on the grass."


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translators' tokenizers)."""


@pytest.fixture(scope="module")
def base(run_dir, tmp_path_factory):
    """Version 1: float32 weights; version 2: int8 (dynamic-range quantization)."""
    base = tmp_path_factory.mktemp("litert") / "m30k-ende-lite"
    export = ["export", "--model", str(run_dir), "--format", "tflite", "--output", str(base)]
    export += ["--source-length", str(SOURCE_LENGTH), "--extra-length", str(EXTRA_LENGTH)]
    cli.main(export)
    cli.main([*export, "--quantize", "dynamic"])
    return base


@pytest.fixture(scope="module")
def int8(base):
    return TFLiteTranslator(base / "2" / TFLITE_MODEL)


def test_a_tflite_version_translates_as_the_keras_translator(base, run_dir):
    translator = load_run(run_dir)
    search = translator.search.replace(extra_length=EXTRA_LENGTH)
    lite = TFLiteTranslator(base / "1" / TFLITE_MODEL)
    assert lite.search == search
    assert (base / "1" / MODEL_INFO).is_file()
    texts, scores = lite.translate(SENTENCES)
    assert texts == translator.translate(SENTENCES, search)
    assert scores.shape == (3,) and (scores < 0).all()


def test_a_batched_export_translates_as_one_sentence_a_call(base, run_dir, tmp_path):
    # Four sentences in batches of 3: a full batch, then one sentence and two copies of it.
    batched = tmp_path / "batched.tflite"
    export = ["export", "--model", str(run_dir), "--format", "tflite", "--output", str(batched)]
    export += ["--source-length", str(SOURCE_LENGTH), "--extra-length", str(EXTRA_LENGTH)]
    cli.main([*export, "--batch-size", "3"])
    batched = TFLiteTranslator(batched)
    one = TFLiteTranslator(base / "1" / TFLITE_MODEL)
    assert (batched.batch_size, one.batch_size) == (3, 1)
    sentences = [*SENTENCES, "A child jumps."]
    texts, scores = batched.translate(sentences)
    expected_texts, expected_scores = one.translate(sentences)
    assert texts == expected_texts
    assert scores == pytest.approx(expected_scores, abs=1e-4)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps")
def test_the_first_call_drops_the_model_files_pages_and_changes_no_translation(base, int8):
    path = base / "2" / TFLITE_MODEL
    expected = int8.translate(SENTENCES)
    fresh = TFLiteTranslator(path)
    assert resident_bytes(path) > 0  # the interpreter read the file's structure
    first = fresh.translate(SENTENCES[:1])
    assert resident_bytes(path) == 0  # XNNPACK repacked the weights: the file's pages went
    texts, scores = fresh.translate(SENTENCES)
    assert (texts[0], scores[0]) == (first[0][0], first[1][0])
    assert texts == expected[0]
    np.testing.assert_array_equal(scores, expected[1])


def test_int8_lookups_are_within_half_a_step_of_the_table_and_end_with_the_export(run_dir):
    model = load_run(run_dir).model
    (embedding,) = [layer for layer in sublayers(model) if isinstance(layer, SharedEmbedding)]
    ids = np.array([[1, 5, 7, 499]])
    exact = embedding(ids).numpy()
    with int8_lookups(model):
        looked_up = embedding(ids).numpy()
    table = embedding.embeddings.numpy()[ids[0]]
    half_step = np.abs(table).max(axis=1) / 127 / 2 * np.sqrt(embedding.d_model)
    assert (np.abs(looked_up - exact)[0] <= half_step[:, None] * (1 + 1e-5)).all()
    assert not np.array_equal(looked_up, exact)
    np.testing.assert_array_equal(embedding(ids).numpy(), exact)


def test_a_long_sentence_is_cut_to_the_exports_source_length_loudly(int8, caplog):
    (length,) = int8.source_lengths([LONG])
    assert length > SOURCE_LENGTH
    with caplog.at_level(logging.WARNING):
        ids = int8.source_ids([SENTENCES[0], LONG])
    assert ids.shape == (2, SOURCE_LENGTH) and ids[1, -1] == 2  # EOS kept
    assert "cut (sentences 2)" in caplog.text


@pytest.fixture(scope="module")
def server(base):
    both = Specific(versions=(1, 2))
    server = ModelServer(ModelManager([ServedModel("lite", base, both)]), server_settings())
    LibreTranslate.add_to(server, LibreTranslateSettings())
    server.start()
    yield server
    server.stop()


def test_the_server_answers_tf_servings_apis_from_the_int8_version(server, int8):
    status, reply = http(server, "/v1/models/lite")
    assert status == 200
    assert {v["version"]: v["state"] for v in reply["model_version_status"]} == {
        "1": "AVAILABLE",
        "2": "AVAILABLE",
    }
    status, reply = http(server, "/v1/models/lite/metadata")
    signatures = reply["metadata"]["signature_def"]["signature_def"]
    assert sorted(signatures) == ["serving_default", "source_lengths", "translate_options"]
    outputs = predict_outputs(server, "lite", "serving_default", {"text": SENTENCES})
    texts, scores = int8.translate(SENTENCES)
    assert outputs["translations"] == texts
    assert outputs["scores"] == pytest.approx(scores.tolist(), abs=1e-5)


def test_only_the_exports_search_and_signatures_are_answered(server, int8):
    search = int8.search
    inputs = {"text": SENTENCES[:1], "alpha": search.alpha, "extra_length": EXTRA_LENGTH}
    outputs = predict_outputs(
        server, "lite", "translate_options", {**inputs, "beam_size": search.beam_size}
    )
    assert outputs["n_best_translations"][0] == [outputs["translations"][0], "", "", ""]
    body = {"signature_name": "translate_options", "inputs": {**inputs, "beam_size": 8}}
    status, reply = http(server, "/v1/models/lite:predict", body)
    assert status == 400 and "beam_size 4" in reply["error"] and "fixed at export" in reply["error"]
    not_utf8 = {"b64": base64.b64encode(b"\xff\xfe dog").decode()}
    status, reply = http(server, "/v1/models/lite:predict", {"inputs": {"text": [not_utf8]}})
    assert status in (200, 400), reply  # the tokenizer's answer, never a server error
    body = {"signature_name": "attention", "inputs": {"text": ["A dog."], "translation": ["x"]}}
    status, reply = http(server, "/v1/models/lite:predict", body)
    assert status == 400 and "attention" in reply["error"]


def test_libretranslate_translates_with_the_int8_version(server, int8):
    status, reply = http(server, "/languages")
    assert status == 200 and {"en", "de"} <= {language["code"] for language in reply}
    form = {"q": SENTENCES[0], "source": "en", "target": "de", "alternatives": 2}
    status, reply = http(server, "/translate", raw=urllib.parse.urlencode(form).encode())
    assert status == 200, reply
    assert reply["translatedText"] == int8.translate(SENTENCES[:1])[0][0]
    assert reply["alternatives"] == []  # one hypothesis: none other to offer


def test_translate_reads_a_tflite_model(base, int8, tmp_path, capsys):
    source, output = tmp_path / "source.en", tmp_path / "output.de"
    source.write_text("".join(line + "\n" for line in SENTENCES))
    model = str(base / "2" / TFLITE_MODEL)
    cli.main(["translate", "--model", model, "--input", str(source), "--output", str(output)])
    assert output.read_text().splitlines() == int8.translate(SENTENCES)[0]
    with pytest.raises(SystemExit):
        cli.main(["translate", "--model", model, "--input", str(source), "--beam", "2"])
    assert "fixed at export" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["translate", "--model", model, "--input", str(source), "--n-best", "2"])
    assert "n_best need a run directory" in capsys.readouterr().err
