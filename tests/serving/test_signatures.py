"""What a SavedModel version tells a server beyond its translations: the languages it records
(`layout.MODEL_INFO`), its weight bytes, the `attention` and `source_lengths` signatures, and the
requests its graph refuses in words."""

import dataclasses
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.analysis.attention_plot import attention_maps
from keras_transformer.decoding.translator import load_run
from keras_transformer.errors import ConfigError
from keras_transformer.export.exporter import ExportOptions, exported_languages
from keras_transformer.export.layout import MODEL_INFO
from keras_transformer.search_settings import SearchSettings
from keras_transformer.server.errors import ServingError
from keras_transformer.server.models.limits import Limits
from keras_transformer.server.models.servable import Servable
from pipelines.tokenizer import BOS_ID, EOS_ID

pytestmark = pytest.mark.slow  # loads a SavedModel


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translator's tokenizer)."""


@pytest.fixture(scope="module")
def translator(run_dir):
    return load_run(run_dir)


SOURCES = ["Two men play football in a park.", "A dog runs."]
TRANSLATIONS = ["Ein Hund rennt.", "Zwei Männer spielen im Park Fußball."]


@pytest.fixture(scope="module")
def loaded(exported):
    """The loaded version (kept, so that its signatures keep their variables)."""
    return tf.saved_model.load(str(exported / "1"))


@pytest.fixture(scope="module")
def servable(exported):
    servable = Servable("m30k-ende", 1, exported / "1")
    servable.load()
    return servable


def test_export_records_the_runs_languages_and_max_length(exported):
    info = json.loads((exported / "1" / MODEL_INFO).read_text(encoding="utf-8"))
    assert info == {
        "source_language": "en",
        "target_language": "de",
        "target_language_tokens": {},
        "max_length": 24,
        "search": dataclasses.asdict(SearchSettings()),  # serving_default's
    }


def test_export_options_override_the_runs_languages(run_dir):
    assert exported_languages(ExportOptions(), run_dir) == ("en", "de")
    assert exported_languages(ExportOptions(target_language="fr"), run_dir) == ("en", "fr")
    assert exported_languages(ExportOptions(source_language="cs")) == ("cs", None)
    with pytest.raises(ConfigError, match="apply to formats saved_model and tflite"):
        ExportOptions(format="ctranslate2", source_language="en")


def test_loaded_version_has_its_info_and_weight_bytes(servable, translator):
    assert servable.info["target_language"] == "de"
    weights = sum(w.numpy().nbytes for w in translator.model.weights)
    assert servable.weight_bytes == weights


def test_an_export_without_model_info_loads_with_empty_info(exported, tmp_path):
    older = tmp_path / "1"
    shutil.copytree(exported / "1", older)
    (older / MODEL_INFO).unlink()
    servable = Servable("older", 1, older)
    servable.load()
    assert servable.info == {} and servable.weight_bytes > 0


def ids_with_eos(tokenizer, tokenize, sentence):
    return [int(i) for i in tokenize(tf.constant([sentence]))[0].numpy()] + [EOS_ID]


def test_attention_is_the_keras_models_teacher_forced_attention(loaded, translator):
    served = loaded.signatures["attention"](
        text=tf.constant(SOURCES), translation=tf.constant(TRANSLATIONS)
    )
    served = {name: value.numpy() for name, value in served.items()}
    tokenizer, model = translator.tokenizer, translator.model
    layers, heads = len(model.encoder_layers), model.config.num_heads
    batch, width = served["source_pieces"].shape
    length = served["target_pieces"].shape[1]
    assert served["encoder_self_attention"].shape == (batch, layers, heads, width, width)
    assert served["encoder_decoder_attention"].shape == (batch, layers, heads, length, width)
    for row, (source, translation) in enumerate(zip(SOURCES, TRANSLATIONS, strict=True)):
        source_ids = ids_with_eos(tokenizer, tokenizer.tokenize, source)
        target_ids = ids_with_eos(tokenizer, tokenizer.tokenize_target, translation)
        s, t = len(source_ids), len(target_ids)
        pieces = tokenizer.pieces(source_ids[:-1]) + ["</s>"] + [""] * (width - s)
        assert [p.decode() for p in served["source_pieces"][row]] == pieces
        pieces = tokenizer.pieces(target_ids[:-1]) + ["</s>"] + [""] * (length - t)
        assert [p.decode() for p in served["target_pieces"][row]] == pieces
        target_in = np.array([BOS_ID, *target_ids[:-1]], np.int32)
        for layer in range(layers):
            encoder, cross = attention_maps(model, np.array(source_ids, np.int32), target_in, layer)
            served_encoder = served["encoder_self_attention"][row, layer]
            served_cross = served["encoder_decoder_attention"][row, layer]
            np.testing.assert_allclose(served_encoder[:, :s, :s], encoder, atol=1e-5)
            np.testing.assert_allclose(served_cross[:, :t, :s], cross, atol=1e-5)
            assert not served_encoder[:, :s, s:].any() and not served_cross[:, :t, s:].any()
    for name in ("encoder_self_attention", "encoder_decoder_attention"):
        np.testing.assert_allclose(served[name].sum(axis=-1), 1.0, atol=1e-5)


def test_source_lengths_count_every_subword_and_eos_before_any_cut(loaded, translator):
    long = " ".join(["Two men play football in a park."] * 6)
    sentences = [long, "A dog runs.", ""]
    served = loaded.signatures["source_lengths"](text=tf.constant(sentences))
    tokenizer = translator.tokenizer
    expected = [len(ids_with_eos(tokenizer, tokenizer.tokenize, s)) for s in sentences]
    assert served["source_lengths"].numpy().tolist() == expected
    assert expected[0] > translator.model.config.max_length and expected[2] == 1


# Requests that `translate_ids` refuses (the run's max_length is 24), and the words it answers.
GRAPH_FAULTS = [
    ({"alpha": float("nan")}, "alpha nan is not a finite number >= 0"),
    ({"alpha": float("inf")}, "alpha inf is not a finite number >= 0"),
    ({"alpha": -0.5}, "alpha -0.5 is not a finite number >= 0"),
    ({"extra_length": 10**6}, "extra_length 1000000 is not in 0..50"),
    ({"source_ids": [[5] * 1023 + [2]]}, "source_ids width 1024 is over max_length 24"),
]


def ids_inputs(**changes):
    return {"source_ids": [[40, 41, 2]], "beam_size": 2, "alpha": 0.6, "extra_length": 3, **changes}


@pytest.mark.parametrize("change, message", GRAPH_FAULTS)
def test_the_graph_itself_refuses_the_request(loaded, change, message):
    """As TensorFlow Serving would run it: no check of ours before the graph."""
    inputs = ids_inputs(**change)
    dtypes = {"alpha": tf.float32}
    tensors = {k: tf.constant(v, dtypes.get(k, tf.int32)) for k, v in inputs.items()}
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        loaded.signatures["translate_ids"](**tensors)


@pytest.mark.parametrize(
    "change, message",
    [
        *GRAPH_FAULTS,
        ({"beam_size": 2.5}, "input 'beam_size' holds 2.5: int32 values of beam_size are integers"),
    ],
)
def test_a_refused_request_is_answered_in_words(servable, change, message):
    """The graph's own message, without TensorFlow's wrapping (node names, "assertion failed")."""
    with pytest.raises(ServingError) as refused:
        arrays = servable.arrays("translate_ids", ids_inputs(**change), Limits())
        servable.run("translate_ids", arrays)
    assert str(refused.value) == message and refused.value.status == 400
