"""Imported reference checkpoints against transformers' own numbers (tests/fixtures/marian, an
independent reference): encoder output and logits within 1e-4, greedy ids equal to
`generate()`'s, beam search as the checkpoint's generation config sets it equal in ids and
scores, compared in Marian's ids; and `translate` from the command line on an imported run."""

import subprocess
import sys

import numpy as np
import pytest

from imported_runs import CHECKPOINTS, marian_order, reference, reference_tensors, to_our_ids
from keras_transformer import Transformer
from keras_transformer.config import ConfigError
from keras_transformer.decoding.forced import forced_decode
from keras_transformer.decoding.translator import Translator, pad_to_bucket, with_target_language
from keras_transformer.run_directory import FINAL_WEIGHTS, read_config, run_tokenizer
from keras_transformer.search_settings import SearchSettings
from pipelines.tokenizer import EOS_ID, PAD_ID
from repo_paths import REPO_ROOT

TOLERANCE = 1e-4


@pytest.fixture(scope="module", params=CHECKPOINTS)
def imported_model(request, imported_run):
    """(name, run, model): a checkpoint imported with max_length transformers'
    `max_new_tokens`, so that both searches stop at the same length."""
    name = request.param
    run = imported_run(name, max_length=reference(name)["max_new_tokens"])
    model = Transformer(read_config(run))
    model.load_weights(run / FINAL_WEIGHTS)
    return name, run, model


@pytest.fixture
def imported(imported_model):
    """(name, translator). The tokenizer is made in the test: `tf.random.set_seed` (the
    `_seed` fixture) deletes the SentencePiece resources of tokenizers made before it."""
    name, run, model = imported_model
    return name, Translator(model, run_tokenizer(run))


def as_marian(name, rows) -> list[list[int]]:
    """Our output rows as Marian ids: up to and with the first EOS, PAD dropped."""
    order = marian_order(name)
    hypotheses = []
    for row in np.asarray(rows).tolist():
        row = row[: row.index(EOS_ID) + 1] if EOS_ID in row else row
        hypotheses.append([int(order[i]) for i in row if i != PAD_ID])
    return hypotheses


def test_our_tokenizer_gives_transformers_source_ids(imported):
    name, translator = imported
    expected = reference(name)["source_ids"]
    ours = translator.encode_sentences(reference(name)["sources"])
    assert [to_our_ids(name, ids).tolist() for ids in expected] == ours


def test_encoder_output_and_logits_within_tolerance(imported):
    name, translator = imported
    tensors = reference_tensors(name)
    source_real = tensors["attention_mask"] == 1
    target_real = tensors["decoder_attention_mask"] == 1
    source = np.where(source_real, to_our_ids(name, tensors["input_ids"]), PAD_ID)
    target_in = np.where(target_real, to_our_ids(name, tensors["decoder_input_ids"]), PAD_ID)
    encoder_output, _ = translator.model.encode(source)
    encoder_error = np.abs(np.asarray(encoder_output) - tensors["encoder_output"])[source_real]
    # Our logits in Marian's column order (our new PAD column has no counterpart).
    marian_columns = to_our_ids(name, np.arange(tensors["logits"].shape[-1]))
    logits = np.asarray(translator.model((source, target_in)))[..., marian_columns]
    logits_error = np.abs(logits - tensors["logits"])[target_real]
    print(f"{name}: max |Δ| encoder {encoder_error.max():.2e}, logits {logits_error.max():.2e}")
    assert encoder_error.max() < TOLERANCE
    assert logits_error.max() < TOLERANCE


def test_greedy_ids_equal_generate(imported):
    name, translator = imported
    expected = reference(name)
    source = pad_to_bucket(translator.encode_sentences(expected["sources"]))
    greedy = SearchSettings(beam_size=1, extra_length=expected["max_new_tokens"])
    ids, _ = translator.decode_ids(source, greedy)
    assert as_marian(name, ids) == expected["greedy_ids"]


def transformers_beam(expected) -> SearchSettings:
    """Our search as transformers' generate() searched: its beam and α, and its |Y|^α penalty
    (|Y| counting `</s>`, as ours does); up to `max_new_tokens` tokens."""
    settings = expected["beam_settings"]
    return SearchSettings(
        beam_size=settings["num_beams"],
        alpha=settings["length_penalty"],
        penalty="length",
        extra_length=expected["max_new_tokens"],
    )


def test_beam_ids_and_scores_equal_generate_on_every_sentence(imported):
    """Beam search as the checkpoint's generation config sets it (`num_beams`,
    `length_penalty`, `early_stopping`): our ids equal transformers' on every sentence and our
    scores, log P(Y) / |Y|^α over the full vocabulary's log-softmax, are theirs within 1e-4.

    Our search stops only when no open hypothesis can win at the longest length; transformers'
    `early_stopping=False` guesses from the current length. Where that guess stopped it early
    (the fixture's `exhaustive_ids`, generate() with `early_stopping="never"`, differ from its
    `beam_ids`), ours must equal the exhaustive search, which transformers itself scores at
    least as high as its early stop. (transformers also finishes `</s>` only among a step's
    `beam` best candidates, ours among the `2 × beam` best, which could let ours find a higher
    score than both; on these references it never does.)
    """
    name, translator = imported
    expected = reference(name)
    source = pad_to_bucket(translator.encode_sentences(expected["sources"]))
    ids, scores = translator.decode_ids(source, transformers_beam(expected))
    ours = as_marian(name, ids)
    for i, (mine, score) in enumerate(zip(ours, np.asarray(scores), strict=True)):
        stopped_early = expected["beam_ids"][i] != expected["exhaustive_ids"][i]
        if stopped_early:
            print(f"{name} sentence {i}: transformers' early stop kept a lower score")
            assert expected["exhaustive_scores"][i] >= expected["beam_scores"][i]
        key = "exhaustive" if stopped_early else "beam"
        assert mine == expected[f"{key}_ids"][i], f"sentence {i}"
        assert abs(score - expected[f"{key}_scores"][i]) < TOLERANCE, f"sentence {i}"


def test_forced_log_probs_of_generates_hypotheses_are_its_scores(imported):
    """Our model's log P of transformers' beam hypotheses, normalized over the full vocabulary
    and `<pad>` then masked as transformers does, is its score times |Y|^α."""
    name, translator = imported
    expected = reference(name)
    source = pad_to_bucket(translator.encode_sentences(expected["sources"]))
    theirs = [to_our_ids(name, row).tolist() for row in expected["beam_ids"]]
    forced = forced_decode(translator.model, source, pad_to_bucket(theirs))
    alpha = expected["beam_settings"]["length_penalty"]
    lengths = np.array([len(row) for row in theirs], np.float64)
    their_log_probs = np.array(expected["beam_scores"]) * lengths**alpha
    np.testing.assert_allclose(forced.log_probs, their_log_probs, atol=TOLERANCE * lengths.max())


@pytest.mark.slow
def test_translate_from_the_command_line_on_an_imported_run(imported_run, tmp_path):
    """`translate --model RUN --beam 1 --target-language fra` gives transformers' greedy
    translations of the sentences it read with `>>fra<<` (those it finished within its length
    limit)."""
    expected = reference("tc-big")
    eos = marian_order("tc-big")[EOS_ID]
    finished = [
        i
        for i, ids in enumerate(expected["greedy_ids"])
        if ids and ids[-1] == eos and expected["sources"][i].startswith(">>fra<< ")
    ][:4]
    assert finished
    sources = tmp_path / "sources.txt"
    text = "".join(expected["sources"][i].removeprefix(">>fra<< ") + "\n" for i in finished)
    sources.write_text(text, encoding="utf-8")
    command = [sys.executable, "-m", "keras_transformer", "translate", "--beam", "1"]
    command += ["--model", str(imported_run("tc-big")), "--input", str(sources)]
    command += ["--target-language", "fra"]
    translated = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert translated.stdout.splitlines() == [expected["greedy_texts"][i] for i in finished]


def test_a_target_language_must_be_one_the_model_reads(imported):
    name, translator = imported
    if name == "tc-big":
        assert with_target_language(["A dog."], translator.tokenizer, "deu") == [">>deu<< A dog."]
    with pytest.raises(ConfigError, match="target_language 'xyz' is not one of"):
        with_target_language(["A dog."], translator.tokenizer, "xyz")
