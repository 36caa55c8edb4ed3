"""Parsing with the translation machinery (§6.3): `train --dataset ptb` and `evaluate` end to end
on a slice of the Penn Treebank sample, with §6.3's search by default and the repair rate."""

import json
import zipfile

import nltk
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the export uses)
from ai_edge_litert.interpreter import Interpreter

from keras_transformer import cli
from keras_transformer.analysis.evaluation import task
from keras_transformer.cli import commands
from keras_transformer.decoding.translator import load_run
from keras_transformer.export.tflite import TFLITE_SOURCE_LENGTH
from keras_transformer.parsing.constituency import parse_scores, present
from keras_transformer.search_settings import SearchSettings
from pipelines.tokenizer import PAD_ID

pytestmark = pytest.mark.slow  # trains a parser through the CLI

# Real files of each split: 89 sentences to train on, 5 to validate, 3 to test.
SLICE = [*range(1, 11), 160, 185]
# The tiny preset with one layer a stack: what these tests prove does not depend on depth, and
# training, evaluation and export each trace graphs that grow with it.
TINY = ["--preset", "tiny", "--set", "num_layers=1", "--set", "vocab_size=300"]


@pytest.fixture(scope="module")
def ptb_slice(tmp_path_factory, ptb_dir):
    """A treebank.zip of a few files of each split, as a data directory of its own."""
    directory = tmp_path_factory.mktemp("ptb_slice")
    with (
        zipfile.ZipFile(ptb_dir / "treebank.zip") as full,
        zipfile.ZipFile(directory / "treebank.zip", "w") as part,
    ):
        for number in SLICE:
            name = f"treebank/combined/wsj_{number:04d}.mrg"
            part.writestr(name, full.read(name))
    return directory


def test_a_ptb_run_decodes_with_the_search_of_section_6_3():
    parsing, translation = task("ptb", "tree"), task("multi30k", "de")
    assert parsing.search == SearchSettings(beam_size=21, alpha=0.3, extra_length=300)
    assert translation.search == SearchSettings(beam_size=4, alpha=0.6, extra_length=50)
    args = cli.build_parser().parse_args(["evaluate", "--model", "run", "--alpha", "0.5"])
    assert commands.searched(parsing, args) == SearchSettings(21, 0.5, extra_length=300)


def test_parse_scores_repair_what_they_score():
    sentences = ["Rain fell .", "It stopped ."]
    references = ["(S (NP XX ) (VP XX ) . )", "(S (NP XX ) (VP XX ) . )"]
    hypotheses = ["(S (NP XX ) (VP XX ) . )", "(S (NP XX (VP XX"]  # unclosed, one word short
    scores = parse_scores(sentences, hypotheses, references)
    assert (scores["repaired"], scores["repair_rate"]) == (1, 50.0)
    # Repaired, "(S (NP XX (VP XX ) ) XX )" has S 0-2, NP 0-2, VP 1-2 (without the "."): the
    # gold NP 0-1 is missed.
    assert (scores["matched_brackets"], scores["gold_brackets"], scores["test_brackets"]) == (
        5,
        6,
        6,
    )


def test_a_lexicalized_parse_scores_as_its_xx_form_whatever_words_it_copies():
    sentences = ["Rain fell hard .", "It stopped ."]
    references = ["(S (NP Rain ) (VP fell (ADVP hard ) ) . )", "(S (NP XX ) (VP XX ) . )"]
    lexicalized = ["(S (NP Rain ) (VP fell hard ) . )", "(S (NP Is ) (VP stopped ) . )"]
    xx_form = ["(S (NP XX ) (VP XX XX ) . )", "(S (NP XX ) (VP XX ) . )"]
    assert parse_scores(sentences, lexicalized, references) == parse_scores(
        sentences, xx_form, references
    )
    assert present("It stopped .", lexicalized[1]) == "(S (NP (XX It)) (VP (XX stopped)) (. .))"


def test_translate_prints_the_repaired_tree_over_the_words():
    assert (
        present("Rain fell .", "(S (NP XX ) (VP XX ) . )")
        == "(S (NP (XX Rain)) (VP (XX fell)) (. .))"
    )
    assert present("Rain fell .", "(S (NP XX (VP XX") == "(S (NP (XX Rain) (VP (XX fell))) (XX .))"
    assert present("  ", "") == ""  # a blank input line stays blank, as in translation


def test_train_and_evaluate_a_parser_through_the_cli(ptb_slice, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KT_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "run"
    cli.main(
        [
            *("train", "--dataset", "ptb", "--data-dir", str(ptb_slice), "--output", str(run)),
            *TINY,
            *("--set", "max_length=128"),
            *("--batch-tokens", "1024", "--max-steps", "2", "--checkpoint-every", "2"),
            *("--bleu-every", "2", "--bleu-sentences", "2"),
        ]
    )
    settings = json.loads((run / "run.json").read_text())
    assert (settings["dataset"], settings["source_language"], settings["target_language"]) == (
        "ptb",
        "words",
        "tree",
    )
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    validation = [r for r in records if r["kind"] == "parsing"]
    assert [r["step"] for r in validation] == [2]
    assert 0 <= validation[0]["val_f1"] <= 100 and 0 <= validation[0]["val_repair_rate"] <= 100

    capsys.readouterr()
    # The data directory comes from run.json, the split is the test split, α is §6.3's.
    cli.main(["evaluate", "--model", str(run), "--dataset", "ptb", "--beam", "3"])
    printed = capsys.readouterr().out
    assert printed.startswith("test words->tree beam 3: F1 ") and "repaired" in printed
    scores = json.loads((run / "eval" / "model" / "test.beam3.alpha0.3.scores.json").read_text())
    assert (scores["beam_size"], scores["alpha"], scores["extra_length"]) == (3, 0.3, 300)
    assert scores["sentences"] == 3 and 0 <= scores["f1"] <= 100
    hypotheses = (run / "eval" / "model" / "test.beam3.alpha0.3.hyp").read_text().splitlines()
    assert len(hypotheses) == 3

    with pytest.raises(SystemExit, match="trained on 'ptb', not 'multi30k'"):
        cli.main(["evaluate", "--model", str(run), "--dataset", "multi30k"])
    with pytest.raises(
        SystemExit, match="well_formed_trees needs a parser trained with target_language lex"
    ):
        cli.main(["evaluate", "--model", str(run), "--well-formed"])

    # `translate` prints trees over the input's words, however ill-formed the decoded strings.
    sentences = ["Rain fell .", "Ms. Haag plays Elianti ."]
    (tmp_path / "sentences.txt").write_text("\n".join(sentences) + "\n")
    capsys.readouterr()
    cli.main(
        [
            "translate",
            "--model",
            str(run),
            "--beam",
            "2",
            "--input",
            str(tmp_path / "sentences.txt"),
        ]
    )
    trees = [nltk.Tree.fromstring(line) for line in capsys.readouterr().out.splitlines()]
    assert [tree.leaves() for tree in trees] == [s.split() for s in sentences]

    # The export's serving_default searches as §6.3 (α 0.3, +300), here with the beam given.
    cli.main(["export", "--model", str(run), "--output", str(tmp_path / "export"), "--beam", "2"])
    signatures = tf.saved_model.load(str(tmp_path / "export" / "1")).signatures
    text = tf.constant(sentences)
    default = signatures["serving_default"](text=text)
    explicit = signatures["translate_options"](
        text=text, beam_size=tf.constant(2), alpha=tf.constant(0.3), extra_length=tf.constant(300)
    )
    assert default["translations"].numpy().tolist() == explicit["translations"].numpy().tolist()
    np.testing.assert_allclose(default["scores"], explicit["scores"], rtol=1e-6)


@pytest.mark.long(
    covered_by=[
        "tests/parsing/test_parsing.py::test_train_and_evaluate_a_parser_through_the_cli",
        "tests/training/test_prepared_training.py::test_a_run_trains_on_the_shards_and_translates_evaluates_and_resumes",
    ]
)
def test_a_parser_trains_on_prepared_shards_and_evaluates_as_one(
    ptb_slice, tmp_path, monkeypatch, capsys
):
    """`prepare --dataset ptb` then `train --data`: the run is a parser (§6.3's validation F1,
    search and trees), not a translator of words into brackets."""
    monkeypatch.setenv("KT_CACHE_DIR", str(tmp_path / "cache"))
    prepared, run = tmp_path / "prepared", tmp_path / "run"
    prepare = ["prepare", "--dataset", "ptb", "--data-dir", str(ptb_slice), "--tgt-lang"]
    cli.main([*prepare, "lexicalized", "--output", str(prepared), "--vocab-size", "300"])
    cli.main(
        [
            *("train", "--data", str(prepared), "--output", str(run), *TINY),
            *("--set", "max_length=160", "--batch-tokens", "1024"),
            *("--max-steps", "1", "--bleu-every", "1", "--bleu-sentences", "2"),
        ]
    )
    settings = json.loads((run / "run.json").read_text())
    assert (settings["dataset"], settings["task_dataset"]) == ("prepared", "ptb")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "parsing"] == [1]

    capsys.readouterr()
    cli.main(["evaluate", "--model", str(run), "--beam", "2", "--well-formed"])
    printed = capsys.readouterr().out
    assert printed.startswith("test words->lexicalized beam 2: F1 ") and "repaired 0/3" in printed
    scores = json.loads(
        (run / "eval" / "model" / "test.beam2.alpha0.3.well_formed.scores.json").read_text()
    )
    assert scores["sentences"] == 3 and scores["extra_length"] == 300  # §6.3's search


@pytest.mark.long(
    covered_by=[
        "tests/decoding/test_tree_constraint.py::test_an_untrained_model_searches_only_trees_of_its_words",
        "tests/decoding/test_tree_constraint.py::test_constrained_cached_decoding_equals_uncached_and_compacted",
        "tests/parsing/test_parsing.py::test_train_and_evaluate_a_parser_through_the_cli",
    ]
)
def test_a_lexicalized_parser_searches_only_well_formed_trees(
    ptb_slice, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("KT_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "run"
    cli.main(
        [
            *("train", "--dataset", "ptb", "--tgt", "lexicalized", "--data-dir", str(ptb_slice)),
            *("--output", str(run), *TINY),
            *("--set", "max_length=160", "--batch-tokens", "1024", "--max-steps", "1"),
        ]
    )
    evaluate = ["evaluate", "--model", str(run), "--beam", "2"]
    cli.main(evaluate)
    cli.main([*evaluate, "--well-formed"])
    assert "repaired 0/3 (0.0%)" in capsys.readouterr().out.splitlines()[-1]
    directory = run / "eval" / "model"
    stem = "test.beam2.alpha0.3"  # §6.3's α for parsing
    free = json.loads((directory / f"{stem}.scores.json").read_text())
    constrained = json.loads((directory / f"{stem}.well_formed.scores.json").read_text())
    assert (free["well_formed_trees"], constrained["well_formed_trees"]) == (False, True)
    # Untrained, the free search writes no tree; every constrained output is one as decoded.
    assert free["repaired"] == 3 and constrained["repaired"] == 0
    (sentences,) = (tmp_path / "cache").glob("*/test.words")
    hypotheses = (directory / f"{stem}.well_formed.hyp").read_text().splitlines()
    for sentence, hypothesis in zip(sentences.read_text().splitlines(), hypotheses, strict=True):
        assert len(nltk.Tree.fromstring(hypothesis).leaves()) == len(sentence.split())

    # Exported with the constraint, the SavedModel decodes the trees `evaluate` did, unrepaired.
    export = tmp_path / "export"
    cli.main(
        ["export", "--model", str(run), "--output", str(export), "--beam", "2", "--well-formed"]
    )
    serve = tf.saved_model.load(str(export / "1")).signatures["serving_default"]
    served = serve(text=tf.constant(sentences.read_text().splitlines()))["translations"]
    assert [tree.decode() for tree in served.numpy()] == hypotheses

    # So does the TFLite model, whose lengths are fixed at export: the same ids as the SavedModel.
    tflite = tmp_path / "parser.tflite"
    search = ("--beam", "2", "--extra-length", "60", "--well-formed")
    cli.main(
        ["export", "--model", str(run), "--format", "tflite", "--output", str(tflite), *search]
    )
    runner = Interpreter(model_path=str(tflite)).get_signature_runner("translate")
    serve_ids = tf.saved_model.load(str(export / "1")).signatures["translate_ids"]
    for ids in load_run(run).encode_sentences(sentences.read_text().splitlines()):
        source = np.array([ids + [PAD_ID] * (TFLITE_SOURCE_LENGTH - len(ids))], np.int32)
        expected = serve_ids(
            source_ids=tf.constant(source),
            beam_size=tf.constant(2),
            alpha=tf.constant(0.3),
            extra_length=tf.constant(60),
        )["target_ids"].numpy()[0]
        target = runner(source_ids=source)["target_ids"][0]
        np.testing.assert_array_equal(np.trim_zeros(target, "b"), np.trim_zeros(expected, "b"))
