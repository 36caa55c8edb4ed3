"""Sentences in, translations out: order, empty and over-long lines, the CLI, BLEU, attention."""

import dataclasses
import json
import logging
import math
import shlex
import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, cli
from keras_transformer.analysis import evaluation
from keras_transformer.analysis.attention_plot import attention_maps
from keras_transformer.analysis.evaluation import corpus_scores, task, tune_alpha
from keras_transformer.config import ConfigError
from keras_transformer.decoding.forced import forced_decode
from keras_transformer.decoding.translator import EMPTY, Translator, load_run, pad_to_bucket
from keras_transformer.search_settings import SearchSettings
from pipelines import SubwordTokenizer
from pipelines.corpus import read_lines
from pipelines.tokenizer import EOS_ID

EXTRA = 6  # short outputs keep an untrained model's translations quick


def short(beam_size, **changes) -> SearchSettings:
    """A search of `beam_size` with short outputs (`EXTRA`)."""
    return SearchSettings(beam_size=beam_size, extra_length=EXTRA, **changes)


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests: it clears TensorFlow's eager kernel caches, which
    deletes the SentencePiece resource of the module's translator."""


@pytest.fixture(scope="module")
def translator(run_dir):
    return load_run(run_dir)


SENTENCES = [
    "Two young men are playing soccer on a green field.",
    "A dog.",
    "",
    "A woman in a red coat walks past a large building with many windows.",
    "People sit outside.",
]


def test_translations_come_back_in_input_order_with_empty_lines_kept(translator):
    together = translator.translate(SENTENCES, short(2), batch_sentences=2)
    assert len(together) == len(SENTENCES) and together[2] == ""
    for sentence, translation in zip(SENTENCES, together, strict=True):
        if sentence:
            assert translator.translate([sentence], short(2)) == [translation]
    assert any(together)  # an untrained model still says something


def test_batches_decoded_in_slices_side_by_side_translate_the_same(translator):
    sliced = Translator(translator.model, translator.tokenizer, slices=2)
    for beam_size in (1, 3):
        expected = translator.translate(SENTENCES, short(beam_size))
        assert sliced.translate(SENTENCES, short(beam_size)) == expected


def test_batch_sizes_share_the_search_traced_for_their_row_bucket(translator):
    """Batches of 3, 4, 5 and 6 rows run the searches traced for 3, 4 and 6 rows (with
    `jit_compile`, the programs compiled for them), and each row decodes as it does alone."""
    fresh = Translator(translator.model, translator.tokenizer, slices=2)
    source = pad_to_bucket([[5 + i, 6, 7, 2] for i in range(6)])
    results = {rows: fresh.decode_ids(source[:rows], short(2)) for rows in (3, 4, 5)}
    results[6] = fresh.decode_ids(source, short(2))
    assert fresh._decode.experimental_get_tracing_count() == 3
    for rows, (ids, scores) in results.items():
        assert ids.shape[0] == scores.shape[0] == rows
    ids, scores = results[5]
    for row in range(5):
        alone_ids, alone_scores = fresh.decode_ids(source[row : row + 1], short(2))
        width = alone_ids.shape[1]
        np.testing.assert_array_equal(ids[row, :width], alone_ids[0])
        assert not np.any(ids[row, width:])  # only PAD after the row's own hypothesis
        np.testing.assert_allclose(scores[row], alone_scores[0], rtol=1e-5)


def test_over_long_sentences_are_truncated_with_a_warning(translator, caplog):
    long_line = " ".join(["dog"] * 60)
    with caplog.at_level(logging.WARNING):
        outputs = translator.translate(["", "A cat.", long_line], short(1))
    assert len(outputs) == 3 and outputs[0] == ""
    assert "longer than 23 subwords truncated (lines 3)" in caplog.text


def test_source_lengths_are_padded_to_buckets():
    padded = pad_to_bucket([[5, 2], [5, 6, 7, 8, 9, 10, 11, 12, 2]])
    assert padded.shape == (2, 16) and padded[0, 2:].sum() == 0
    # Never past a max_length that is no multiple of 8: learned positions end there.
    assert pad_to_bucket([[5] * 9, [2]], limit=12).shape == (2, 12)


def test_translate_command_reads_a_file_and_writes_lines(run_dir, tmp_path, translator):
    source = tmp_path / "in.en"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    output = tmp_path / "out.de"
    arguments = ["--model", str(run_dir), "--input", str(source), "--output", str(output)]
    cli.main(["translate", *arguments, "--beam", "2", "--extra-length", str(EXTRA)])
    lines = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert lines == translator.translate(SENTENCES, short(2))


def test_min_length_flag_reaches_translate_and_names_evaluate_files(
    run_dir, first_lines_data, tmp_path, translator
):
    source, output = tmp_path / "in.en", tmp_path / "out.de"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    arguments = ["--model", str(run_dir), "--beam", "2", "--extra-length", str(EXTRA)]
    longest = ["--min-length", "24"]  # the model's max_length: every output at its limit
    cli.main(["translate", *arguments, *longest, "--input", str(source), "--output", str(output)])
    lines = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert lines == translator.translate(SENTENCES, short(2, min_length=24))
    evaluated = tmp_path / "eval"
    cli.main(
        ["evaluate", *arguments, *longest, "--data-dir", str(first_lines_data)]
        + ["--output", str(evaluated)]
    )
    scores = json.loads(
        (evaluated / "test_2016_flickr.beam2.alpha0.6.min24.scores.json").read_text()
    )
    assert scores["min_length"] == 24


def test_a_directory_without_a_run_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="config.json not found: is .* a training run dir"):
        load_run(tmp_path)


def test_evaluate_command_scores_the_test_split_of_the_runs_dataset(
    run_dir, first_lines_data, tmp_path, capsys
):
    output = tmp_path / "eval"
    arguments = ["--model", str(run_dir), "--data-dir", str(first_lines_data)]
    arguments += ["--output", str(output)]
    cli.main(["evaluate", *arguments, "--beam", "2", "--extra-length", str(EXTRA)])
    assert capsys.readouterr().out.startswith("test_2016_flickr en->de beam 2: sacreBLEU ")
    scores = json.loads((output / "test_2016_flickr.beam2.alpha0.6.scores.json").read_text())
    assert (scores["sentences"], scores["alpha"], scores["extra_length"]) == (4, 0.6, EXTRA)
    assert len((output / "test_2016_flickr.beam2.alpha0.6.hyp").read_text().splitlines()) == 4


def test_evaluate_record_appends_one_json_line_a_run(run_dir, first_lines_data, tmp_path):
    """`--record FILE`: the command, the commit, the CPU, the model, the split, the search and
    the scores, a line per evaluation; `--penalty length` names its files apart."""
    output, record = tmp_path / "eval", tmp_path / "records" / "bleu.jsonl"
    arguments = ["--model", str(run_dir), "--data-dir", str(first_lines_data)]
    arguments += ["--output", str(output), "--extra-length", str(EXTRA), "--record", str(record)]
    cli.main(["evaluate", *arguments, "--beam", "2"])
    cli.main(["evaluate", *arguments, "--beam", "2", "--penalty", "length", "--alpha", "1"])
    first, second = (json.loads(line) for line in record.read_text().splitlines())
    scores = json.loads((output / "test_2016_flickr.beam2.alpha0.6.scores.json").read_text())
    assert first["command"] == shlex.join(
        ["keras-transformer", "evaluate", *arguments, "--beam", "2"]
    )
    assert first["scores"]["bleu"] == scores["bleu"] and "alpha" not in first["scores"]
    assert first["search"] == dataclasses.asdict(short(2))
    assert (first["split"], first["model"]["run"]) == ("test_2016_flickr", str(run_dir))
    assert first["model"]["weights"].endswith(".weights.h5") and first["cpu"]
    assert first["commit"] is None or len(first["commit"].removesuffix("+dirty")) == 40
    assert (second["search"]["penalty"], second["search"]["alpha"]) == ("length", 1.0)
    length = json.loads((output / "test_2016_flickr.beam2.alpha1.length.scores.json").read_text())
    assert second["scores"]["bleu"] == length["bleu"]


def test_evaluate_command_tunes_the_length_penalty_on_validation_first(
    run_dir, first_lines_data, tmp_path, capsys
):
    output = tmp_path / "eval"
    arguments = ["--model", str(run_dir), "--data-dir", str(first_lines_data)]
    arguments += ["--output", str(output), "--beam", "2", "--extra-length", str(EXTRA)]
    cli.main(["evaluate", *arguments, "--tune-alpha", "0", "0.6", "5"])
    tuning = json.loads((output / "val.beam2.alpha_tuning.json").read_text())
    validation = {
        alpha: json.loads((output / f"val.beam2.alpha{alpha}.scores.json").read_text())["bleu"]
        for alpha in ("0", "0.6", "5")
    }
    assert tuning["scores"] == validation and tuning["split"] == "val"
    chosen = tuning["chosen_alpha"]
    assert validation[f"{chosen:g}"] == max(validation.values())
    test = json.loads((output / f"test_2016_flickr.beam2.alpha{chosen:g}.scores.json").read_text())
    assert test["alpha"] == chosen and test["sentences"] == 4
    assert f"length penalty α {chosen:g} of" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="tune_alpha chooses alpha"):
        cli.main(["evaluate", *arguments, "--tune-alpha", "0.6", "1", "--alpha", "1"])


def test_evaluate_command_tuned_on_validation_decodes_it_once_an_alpha(
    run_dir, first_lines_data, tmp_path, capsys, monkeypatch
):
    decoded = []
    decode = evaluation.evaluate_corpus

    def counted(translator, source_path, *args):
        decoded.append((evaluation.split_name(source_path), args[-1].alpha))
        return decode(translator, source_path, *args)

    monkeypatch.setattr(evaluation, "evaluate_corpus", counted)
    arguments = ["--model", str(run_dir), "--data-dir", str(first_lines_data)]
    arguments += ["--output", str(tmp_path / "eval"), "--beam", "2", "--extra-length", str(EXTRA)]
    cli.main(["evaluate", *arguments, "--split", "val", "--tune-alpha", "0.6", "5"])
    assert decoded == [("val", 0.6), ("val", 5.0)]
    assert capsys.readouterr().out.splitlines()[-1].startswith("validation en->de beam 2: ")


class LengthPenaltyEcho:
    """A stand-in translator whose output is right only under one length penalty."""

    constraint = None

    def __init__(self, references, right_alpha):
        self.references, self.right_alpha = references, right_alpha

    def translate(self, sources, search):
        if search.alpha == self.right_alpha:
            return self.references
        return ["ein"] * len(self.references)


def test_tune_alpha_chooses_the_best_scoring_alpha_and_the_first_of_a_tie(multi30k_dir, tmp_path):
    files = (multi30k_dir / "val.en.gz", multi30k_dir / "val.de.gz")
    references = read_lines(files[1])

    def tuned(right_alpha, beam_size=4):
        translator = LengthPenaltyEcho(references, right_alpha)
        scoring = task("multi30k", "de")
        alphas = (0.6, 1.3, 2.0)
        search = SearchSettings(beam_size=beam_size)
        chosen, scores = tune_alpha(translator, *files, tmp_path, scoring, alphas, search)
        assert scores["alpha"] == chosen
        return chosen

    assert tuned(right_alpha=1.3) == 1.3
    assert tuned(right_alpha=9.0) == 0.6  # nothing right: every α scores alike, the first stays
    with pytest.raises(ConfigError, match="tuning alpha needs a beam search: beam_size 1"):
        tuned(right_alpha=1.3, beam_size=1)


def test_tuning_alpha_traces_the_search_once(translator, first_lines_data, tmp_path):
    """α reaches the search as a tensor: tuning it over several values runs one trace."""
    fresh = Translator(translator.model, translator.tokenizer)
    files = [first_lines_data / f"val.{language}.gz" for language in ("en", "de")]
    tune_alpha(fresh, *files, tmp_path, task("multi30k", "de"), (0.0, 0.6, 1.3), short(2))
    assert len(list(tmp_path.glob("val.beam2.alpha*.hyp"))) == 3
    assert fresh._decode.experimental_get_tracing_count() == 1


def test_corpus_scores_cased_detokenized_and_tokenized_lowercased():
    references = ["Ein Hund rennt über die Wiese.", "Zwei Männer spielen Fußball."]
    perfect = corpus_scores(references, references, "de")
    assert perfect["bleu"] == pytest.approx(100) and perfect["chrf"] == pytest.approx(100)
    assert perfect["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    lowercased = corpus_scores([r.lower() for r in references], references, "de")
    assert lowercased["bleu"] < 50  # case matters to sacreBLEU
    assert lowercased["bleu_tokenized_lowercase"] == pytest.approx(100)
    # A model trained on lowercased text (`train --lowercase`) is scored case-insensitively.
    case_folded = corpus_scores([r.lower() for r in references], references, "de", lowercase=True)
    assert case_folded["bleu"] == pytest.approx(100) and case_folded["chrf"] == pytest.approx(100)
    assert "|case:lc|" in case_folded["bleu_signature"]


def test_corpus_scores_report_the_length_ratio_and_brevity_penalty():
    references = ["Ein Hund rennt über die Wiese.", "Zwei Männer spielen Fußball."]
    assert corpus_scores(references, references, "de")["brevity_penalty"] == pytest.approx(1)
    # 13a tokens: 7 + 5 in the references, 3 + 5 in the hypotheses.
    short = corpus_scores(["Ein Hund rennt", references[1]], references, "de")
    assert short["length_ratio"] == pytest.approx(8 / 12)
    assert short["brevity_penalty"] == pytest.approx(math.exp(1 - 12 / 8))


def test_attention_maps_are_distributions_over_the_source(translator):
    source = np.array(translator.encode_sentences(["A dog runs on the beach."])[0], np.int32)
    target_in = np.array([1, 40, 41, 42], np.int32)
    encoder, cross = attention_maps(translator.model, source, target_in)
    heads = translator.model.config.num_heads
    assert encoder.shape == (heads, len(source), len(source))
    assert cross.shape == (heads, len(target_in), len(source))
    np.testing.assert_allclose(encoder.sum(-1), 1, atol=1e-5)
    np.testing.assert_allclose(cross.sum(-1), 1, atol=1e-5)


def test_attention_command_writes_a_png(run_dir, tmp_path):
    output = tmp_path / "attention.png"
    cli.main(
        ["attention", "--model", str(run_dir), "--sentence", "A dog.", "--output", str(output)]
    )
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tokenizer_pieces_name_the_subwords(run_dir):
    tokenizer = SubwordTokenizer(run_dir / "subwords.model")
    ids = tokenizer.tokenize(tf.constant(["A dog."])).to_list()[0]
    assert "".join(tokenizer.pieces(ids)).replace("▁", " ").strip() == "A dog."


def test_average_command_writes_the_weights_translation_then_uses(run_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)  # the shared run directory must keep its single weights file
    (run / "checkpoints").mkdir()
    for step in (100, 200, 300):
        shutil.copy(run / "model.weights.h5", run / "checkpoints" / f"ckpt-{step:08d}.weights.h5")
    cli.main(["average", str(run), "--last", "2"])
    cli.main(["average", str(run), "--last", "3"])
    averaged = run / "averaged-last3.weights.h5"
    assert averaged.is_file() and (run / "averaged-last2.weights.h5").is_file()
    assert load_run(run).weights_path == averaged  # the average made last


def n_best_lines(text):
    """Lines `INDEX ||| TEXT ||| SCORE ||| LOG_PROB [||| ALIGNMENT]` as tuples."""
    rows = [line.split(" ||| ") for line in text.splitlines()]
    return [(int(r[0]), r[1], float(r[2]), float(r[3]), *r[4:]) for r in rows]


def test_n_best_hypotheses_are_the_searchs_best_first_with_their_scores(translator):
    n_best = translator.translate_n_best(SENTENCES, short(3, n_best=3))
    assert n_best[2] == [EMPTY]
    best = translator.translate(SENTENCES, short(3))
    assert [hypotheses[0].text for hypotheses in n_best] == best
    source = pad_to_bucket(translator.encode_sentences(SENTENCES[:1]))
    result = translator.decode_n_best(source, short(3, n_best=3))
    np.testing.assert_allclose([h.score for h in n_best[0]], result.scores[0], rtol=1e-5)
    np.testing.assert_allclose([h.log_prob for h in n_best[0]], result.log_probs[0], rtol=1e-5)
    texts = translator.tokenizer.detokenize(result.ids[0]).numpy()
    assert [h.text for h in n_best[0]] == [t.decode() for t in texts]


def test_min_length_at_the_longest_output_makes_every_hypothesis_that_long(translator):
    source = pad_to_bucket(translator.encode_sentences(SENTENCES[:2]))
    limits = np.minimum((source != 0).sum(axis=1) + EXTRA, translator.model.config.max_length)
    for beam_size in (1, 3):
        result = translator.decode_n_best(source, short(beam_size, n_best=beam_size, min_length=24))
        np.testing.assert_array_equal(result.lengths, np.tile(limits[:, None], [1, beam_size]))
        assert not np.any(result.ids.numpy() == EOS_ID)


def test_translate_command_prints_n_best_lines_with_scores_and_alignments(
    run_dir, tmp_path, translator
):
    source = tmp_path / "in.en"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    output = tmp_path / "out.de"
    arguments = ["--model", str(run_dir), "--input", str(source), "--output", str(output)]
    search = ["--beam", "3", "--extra-length", str(EXTRA)]
    cli.main(["translate", *arguments, *search, "--n-best", "3", "--alignments"])
    lines = n_best_lines(output.read_text(encoding="utf-8"))
    expected = translator.translate_n_best(SENTENCES, short(3, n_best=3), alignments=True)
    flat = [(i, *h) for i, hypotheses in enumerate(expected) for h in hypotheses]
    assert [line[:2] + line[4:] for line in lines] == [(i, t, a) for i, t, _, _, a in flat]
    np.testing.assert_allclose([line[2:4] for line in lines], [f[2:4] for f in flat], atol=1e-5)
    assert [line[0] for line in lines if line[0] == 2] == [2]  # the empty line: one hypothesis
    for index, text, *_, alignment in lines:
        words = (len(SENTENCES[index].split()), len(text.split()))
        for pair in alignment.split():
            i, j = map(int, pair.split("-"))
            assert i < words[0] and j < words[1]
    cli.main(["translate", *arguments, *search, "--scores"])
    best = [next(line for line in lines if line[0] == i)[:4] for i in range(len(SENTENCES))]
    assert n_best_lines(output.read_text(encoding="utf-8")) == best


def test_an_unknown_length_penalty_is_a_clear_error():
    with pytest.raises(ConfigError, match="penalty 'gnm' must be one of gnmt, length"):
        SearchSettings(penalty="gnm")


def test_n_best_beyond_the_beam_is_a_clear_error(run_dir, tmp_path):
    (tmp_path / "in.en").write_text("A dog.\n", encoding="utf-8")
    arguments = ["--model", str(run_dir), "--input", str(tmp_path / "in.en")]
    with pytest.raises(SystemExit, match="n_best 5 must be 1 to beam_size 4"):
        cli.main(["translate", *arguments, "--n-best", "5", "--beam", "4"])


def test_score_command_scores_given_translations_by_forced_decoding(run_dir, tmp_path, translator):
    sources = ["A dog runs.", "", "Two men play football."]
    targets = ["Ein Hund rennt.", "Nichts.", ""]
    (tmp_path / "src").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "tgt").write_text("\n".join(targets) + "\n", encoding="utf-8")
    output = tmp_path / "scores"
    files = ["--source", str(tmp_path / "src"), "--target", str(tmp_path / "tgt")]
    cli.main(["score", "--model", str(run_dir), *files, "--output", str(output), "--alpha", "1"])
    lines = n_best_lines(output.read_text(encoding="utf-8"))
    assert [(i, t) for i, t, *_ in lines] == list(enumerate(targets))
    source_ids = pad_to_bucket(translator.encode_sentences(sources))
    target_ids = translator._target_ids(targets, "target")
    forced = forced_decode(translator.model, source_ids, pad_to_bucket(target_ids))
    np.testing.assert_allclose([line[3] for line in lines], forced.log_probs, atol=1e-5)
    lengths = np.array([len(ids) for ids in target_ids])  # EOS included
    np.testing.assert_allclose(
        [line[2] for line in lines], forced.log_probs / ((5 + lengths) / 6), atol=1e-5
    )


def test_score_command_names_the_target_line_too_long_and_a_count_mismatch(run_dir, tmp_path):
    (tmp_path / "src").write_text("A dog.\nA cat.\n", encoding="utf-8")
    (tmp_path / "tgt").write_text("Ein Hund.\n" + "Hund " * 40 + "\n", encoding="utf-8")
    files = ["--source", str(tmp_path / "src"), "--target", str(tmp_path / "tgt")]
    with pytest.raises(SystemExit, match=r"tgt, line 2: \d+ subwords with EOS, more than"):
        cli.main(["score", "--model", str(run_dir), *files])
    (tmp_path / "tgt").write_text("Ein Hund.\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="line counts differ"):
        cli.main(["score", "--model", str(run_dir), *files])


def test_word_indices_follow_the_subword_models_word_marks(run_dir):
    tokenizer = SubwordTokenizer(run_dir / "subwords.model")
    sentence = "Two youngsters splash in a fountain."
    ids = tokenizer.tokenize(tf.constant([sentence])).to_list()[0]
    indices = tokenizer.word_indices(ids)
    assert indices[0] == 0 and indices[-1] == len(sentence.split()) - 1
    assert all(b - a in (0, 1) for a, b in zip(indices, indices[1:], strict=False))
    assert len(ids) > len(sentence.split())  # some word is split into subwords


def test_translate_and_evaluate_stop_once_the_n_best_are_final(
    translator, first_lines_data, tmp_path
):
    """`n_best` 1 stops each sentence once its best hypothesis is final: fewer hypothesis-steps
    than a search that must also be sure of the next three, and the same best translations.
    The untrained model's EOS embedding is scaled up, so that hypotheses end before the length
    limit, some early and some late, as a trained model's do."""
    model = Transformer(translator.model.config)
    model.set_weights(translator.model.get_weights())
    embeddings = model.get_layer("shared_embedding").embeddings
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[EOS_ID]], [embeddings[EOS_ID] * 8]))
    counted = Translator(model, translator.tokenizer)
    files = [first_lines_data / f"test_2016_flickr.{language}.gz" for language in ("en", "de")]
    score = task("multi30k", "de").score
    translations, evaluated, steps = {}, {}, {}
    for n_best in (1, 4):
        search = SearchSettings(beam_size=4, n_best=n_best)
        before = counted.hypothesis_steps
        translations[n_best] = counted.translate(SENTENCES, search)
        steps["translate", n_best] = counted.hypothesis_steps - before
        before = counted.hypothesis_steps
        output = tmp_path / f"n_best{n_best}"
        evaluated[n_best] = evaluation.evaluate_corpus(counted, *files, output, score, search)
        evaluated[n_best, "hyp"] = (output / "test_2016_flickr.beam4.alpha0.6.hyp").read_text()
        steps["evaluate", n_best] = counted.hypothesis_steps - before
    assert translations[1] == translations[4]
    assert evaluated[1, "hyp"] == evaluated[4, "hyp"]
    assert evaluated[1]["bleu"] == evaluated[4]["bleu"]
    assert 0 < steps["translate", 1] < steps["translate", 4]
    assert 0 < steps["evaluate", 1] < steps["evaluate", 4]
