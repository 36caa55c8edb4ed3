"""Ensembles: the next token's distribution is the mean of the members', searched as one model's."""

import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig, cli
from keras_transformer.decoding.ensemble import Ensemble, mean_distribution
from keras_transformer.decoding.search import beam_decode, cached_step, greedy_decode
from keras_transformer.decoding.translator import load_run
from keras_transformer.run_directory import CheckpointError, evaluation_directory
from keras_transformer.search_settings import SearchSettings
from pipelines import train_sentencepiece
from pipelines.tokenizer import BOS_ID

CONFIG = TransformerConfig.preset("tiny")
SOURCE = np.array([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0]])
EXTRA = 5


@pytest.fixture(scope="module")
def members():
    """Two members that differ in weights, depth and positional encoding."""
    tf.keras.utils.set_random_seed(3)
    other = CONFIG.replace(num_layers=1, positional_encoding="learned")
    return Transformer(CONFIG), Transformer(other)


def test_next_token_distribution_is_the_mean_of_the_members(members):
    steps, caches, expected = [], [], []
    for model in members:
        encoder_output, source_mask = model.encode(SOURCE, training=False)
        step, cache = cached_step(model, encoder_output, source_mask, max_length=4)
        steps.append(step)
        caches.append(cache)
        logits = model.decode(np.full([2, 1], BOS_ID), encoder_output, source_mask)[:, 0]
        expected.append(tf.nn.softmax(logits).numpy())
    log_probs, _ = mean_distribution(steps)(tf.fill([2], BOS_ID), 0, tuple(caches))
    np.testing.assert_allclose(np.exp(log_probs), np.mean(expected, axis=0), rtol=1e-5, atol=1e-8)


def test_a_model_ensembled_with_itself_decodes_as_the_model_alone(members):
    model = members[0]
    alone, twice = (beam_decode(m, SOURCE, 4, 0.6, EXTRA) for m in (model, Ensemble([model] * 2)))
    np.testing.assert_array_equal(alone.ids, twice.ids)
    np.testing.assert_allclose(alone.scores, twice.scores, rtol=1e-5)
    alone, twice = (greedy_decode(m, SOURCE, EXTRA) for m in (model, Ensemble([model] * 2)))
    np.testing.assert_array_equal(alone.ids, twice.ids)


def test_ensemble_cached_decoding_equals_uncached_and_compacted(members):
    ensemble = Ensemble(members)
    cached = beam_decode(ensemble, SOURCE, beam_size=3, alpha=0.6, extra_length=EXTRA)
    for other in (
        beam_decode(ensemble, SOURCE, beam_size=3, alpha=0.6, extra_length=EXTRA, cached=False),
        beam_decode(ensemble, SOURCE, beam_size=3, alpha=0.6, extra_length=EXTRA, compact=True),
    ):
        np.testing.assert_array_equal(cached.ids, other.ids)
        np.testing.assert_allclose(cached.scores, other.scores, rtol=1e-4)


def test_members_must_share_one_vocabulary_and_decode_within_every_members_positions(members):
    with pytest.raises(ValueError, match=r"share one vocabulary; vocab sizes \[1000, 999\]"):
        Ensemble([members[0], Transformer(CONFIG.replace(vocab_size=999))])
    with pytest.raises(ValueError, match="at least two members, got 1"):
        Ensemble(members[:1])
    shorter = Transformer(CONFIG.replace(max_length=16))
    assert Ensemble([members[0], shorter]).config.max_length == 16


SENTENCES = ["Two dogs play in the snow.", "A man rides a bike."]


@pytest.fixture(scope="module")
def other_run(run_dir, tmp_path_factory):
    """`run_dir` with other weights: the same configuration and vocabulary."""
    other = shutil.copytree(run_dir, tmp_path_factory.mktemp("ensemble") / "other-weights")
    tf.keras.utils.set_random_seed(9)
    model = Transformer(TransformerConfig.from_file(run_dir / "config.json"))
    model.save_weights(other / "model.weights.h5")
    return other


@pytest.mark.slow
def test_translate_command_ensembles_runs(run_dir, tmp_path):
    same = shutil.copytree(run_dir, tmp_path / "same-weights")
    source = tmp_path / "in.en"
    source.write_text("".join(line + "\n" for line in SENTENCES), encoding="utf-8")

    def translate(*ensemble):
        output = tmp_path / "out.de"
        arguments = ["--model", str(run_dir), "--input", str(source), "--output", str(output)]
        cli.main(["translate", *arguments, "--extra-length", str(EXTRA), *ensemble])
        return output.read_text(encoding="utf-8")

    # A run ensembled with a copy of itself (its directory, or its weights file) translates
    # as the run alone.
    alone = translate()
    assert translate("--ensemble", str(same)) == alone
    assert translate("--ensemble", str(same / "model.weights.h5")) == alone


def test_an_ensemble_member_with_another_vocabulary_is_refused_by_name(
    run_dir, multi30k_dir, tmp_path
):
    other = shutil.copytree(run_dir, tmp_path / "other-vocabulary")
    # 500 subwords of the German side alone: the size of run_dir's, not its pieces.
    train_sentencepiece([multi30k_dir / "val.de.gz"], other / "subwords.model", vocab_size=500)
    with pytest.raises(ValueError, match=f"ensemble member {other}: its subword vocabulary is"):
        load_run(run_dir, ensemble=[other])
    with pytest.raises(CheckpointError, match="ensemble member .*missing does not exist"):
        load_run(run_dir, ensemble=[tmp_path / "missing"])


@pytest.mark.long(
    covered_by=[
        "tests/decoding/test_ensemble.py::test_translate_command_ensembles_runs",
        "tests/serving/test_export.py::test_ids_signature_equals_keras_search",
    ]
)
@pytest.mark.slow
def test_an_exported_ensemble_translates_as_the_translator_does(run_dir, other_run, tmp_path):
    search = SearchSettings(extra_length=EXTRA)
    expected = load_run(run_dir, ensemble=[other_run]).translate(SENTENCES, search)
    assert expected != load_run(run_dir).translate(SENTENCES, search)
    members = ["--model", str(run_dir), "--ensemble", str(other_run), "--extra-length", str(EXTRA)]
    cli.main(["export", *members, "--output", str(tmp_path / "saved")])
    saved = tf.saved_model.load(str(tmp_path / "saved" / "1"))
    translations = saved.signatures["serving_default"](text=tf.constant(SENTENCES))["translations"]
    assert [t.decode("utf-8") for t in translations.numpy()] == expected

    from ai_edge_litert.interpreter import Interpreter

    lite = tmp_path / "ensemble.tflite"
    cli.main(["export", *members, "--format", "tflite", "--output", str(lite)])
    source = np.zeros([1, 24], np.int32)  # the TFLite export's width: the model's max_length
    source[0, :5] = [20, 21, 22, 23, 2]
    runner = Interpreter(model_path=str(lite)).get_signature_runner("translate")
    served = saved.signatures["translate_ids"](
        source_ids=tf.constant(source),
        beam_size=tf.constant(search.beam_size),
        alpha=tf.constant(search.alpha),
        extra_length=tf.constant(search.extra_length),
    )
    np.testing.assert_array_equal(runner(source_ids=source)["target_ids"], served["target_ids"])


def test_an_ensembles_evaluation_names_each_member_by_its_run(tmp_path):
    members = [
        tmp_path / "seed2",  # a run directory: its model.weights.h5
        tmp_path / "vocab16k" / "checkpoints" / "ckpt-00002800.weights.h5",
        tmp_path / "long" / "averaged-last10.weights.h5",
    ]
    for run in ("seed2", "vocab16k", "long"):  # a run is the directory with a config.json
        (tmp_path / run).mkdir()
        (tmp_path / run / "config.json").write_text("{}")
    weights = tmp_path / "recipe" / "averaged-last5.weights.h5"
    assert evaluation_directory(tmp_path / "recipe", weights, members) == (
        tmp_path
        / "recipe"
        / "eval"
        / "ensemble-averaged-last5+seed2+vocab16k-ckpt-00002800+long-averaged-last10"
    )
    assert evaluation_directory(tmp_path / "recipe", weights) == (
        tmp_path / "recipe" / "eval" / "averaged-last5"
    )
