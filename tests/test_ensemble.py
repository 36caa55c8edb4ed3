"""Ensembles: the next token's distribution is the mean of the members', searched as one model's."""

import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig, cli
from keras_transformer.callbacks import CheckpointError
from keras_transformer.decoding import beam_decode, cached_step, greedy_decode
from keras_transformer.ensemble import Ensemble, mean_distribution
from keras_transformer.translator import load_run
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
    alone, twice = (
        beam_decode(m, SOURCE, extra_length=EXTRA) for m in (model, Ensemble([model] * 2))
    )
    np.testing.assert_array_equal(alone.ids, twice.ids)
    np.testing.assert_allclose(alone.scores, twice.scores, rtol=1e-5)
    alone, twice = (greedy_decode(m, SOURCE, EXTRA) for m in (model, Ensemble([model] * 2)))
    np.testing.assert_array_equal(alone.ids, twice.ids)


def test_ensemble_cached_decoding_equals_uncached(members):
    ensemble = Ensemble(members)
    cached = beam_decode(ensemble, SOURCE, beam_size=3, extra_length=EXTRA)
    uncached = beam_decode(ensemble, SOURCE, beam_size=3, extra_length=EXTRA, cached=False)
    np.testing.assert_array_equal(cached.ids, uncached.ids)
    np.testing.assert_allclose(cached.scores, uncached.scores, rtol=1e-4)


def test_members_must_share_one_vocabulary_and_decode_within_every_members_positions(members):
    with pytest.raises(ValueError, match=r"share one vocabulary; vocab sizes \[1000, 999\]"):
        Ensemble([members[0], Transformer(CONFIG.replace(vocab_size=999))])
    with pytest.raises(ValueError, match="at least two members, got 1"):
        Ensemble(members[:1])
    shorter = Transformer(CONFIG.replace(max_length=16))
    assert Ensemble([members[0], shorter]).config.max_length == 16


def test_translate_command_ensembles_runs(run_dir, tmp_path):
    same = shutil.copytree(run_dir, tmp_path / "same-weights")
    source = tmp_path / "in.en"
    source.write_text("Two dogs play in the snow.\nA man rides a bike.\n", encoding="utf-8")

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
