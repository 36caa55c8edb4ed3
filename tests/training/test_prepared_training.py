"""`train --data DIR` on a corpus that `prepare` tokenized: a language pair the code has never
heard of, streamed from its shards, then translated and evaluated from the run directory as any
other run."""

import json

import pytest
import tensorflow as tf

from invented_language import invented_pairs, write_pairs
from keras_transformer import cli
from keras_transformer.decoding.translator import load_run
from keras_transformer.run_directory import read_settings
from keras_transformer.search_settings import SearchSettings
from pipelines.prepared import prepared_vocabulary

pytestmark = pytest.mark.slow  # trains through the CLI

# One layer a stack: what these tests prove does not depend on depth, and training, evaluation
# and export each trace graphs that grow with it.
TRAIN = ["train", "--preset", "tiny", "--set", "vocab_size=200", "--batch-tokens", "1024"]
TRAIN += ["--set", "num_layers=1"]
RUN_FLAGS = ["--max-steps", "6", "--checkpoint-every", "3", "--bleu-every", "3"]


@pytest.fixture(scope="module")
def invented(tmp_path_factory):
    """`prepare`'s arguments for an invented language pair's three splits."""
    directory = tmp_path_factory.mktemp("invented")
    files = {
        split: write_pairs(directory, split, invented_pairs(count, seed), (".gz", ".gz"))
        for split, count, seed in (("train", 400, 1), ("validation", 30, 2), ("test", 30, 3))
    }
    arguments = ["prepare", "--src-lang", "xx", "--tgt-lang", "yy"]
    for split, (source, target) in files.items():
        arguments += [f"--{split}", str(source), str(target)]
    return [*arguments, "--vocab-size", "200", "--max-length", "64"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, invented):
    output = tmp_path_factory.mktemp("prepared") / "xx-yy"
    assert cli.main([*invented, "--output", str(output)]) == 0
    return output


def test_a_run_trains_on_the_shards_and_translates_evaluates_and_resumes(tmp_path, prepared):
    run = tmp_path / "run"
    assert cli.main([*TRAIN, "--data", str(prepared), "--output", str(run), *RUN_FLAGS]) == 0
    settings = read_settings(run)
    assert (settings["dataset"], settings["source_language"], settings["target_language"]) == (
        "prepared",
        "xx",
        "yy",
    )
    assert (run / "subwords.model").read_bytes() == prepared_vocabulary(prepared).read_bytes()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "bleu" for r in records)  # validation BLEU on the prepared text
    assert max(r["step"] for r in records) == 6

    assert cli.main(["evaluate", "--model", str(run), "--beam", "1"]) == 0
    scores = json.loads((run / "eval" / "model" / "test.beam1.scores.json").read_text())
    assert scores["sentences"] == 30

    longer = ["--max-steps", "9", "--checkpoint-every", "3", "--bleu-every", "0"]
    assert cli.main([*TRAIN, "--data", str(prepared), "--output", str(run), *longer]) == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    starts = [r["step"] for r in map(json.loads, lines) if r["kind"] == "start"]
    assert starts == [0, 6]  # the rerun resumed where the first process stopped


@pytest.mark.parametrize(
    "extra, error",
    [
        (["--src", "en"], r"prepared for xx->yy, not en->yy"),
        (["--lowercase"], r"prepared with lowercase=False: train with the same"),
        (["--set", "subword_dropout=0.1"], r"subword_dropout .* prepared data is tokenized once"),
    ],
)
def test_what_the_prepared_corpus_fixes_is_refused_by_name(tmp_path, prepared, extra, error):
    with pytest.raises(SystemExit, match=error):
        cli.main([*TRAIN, "--data", str(prepared), "--output", str(tmp_path / "run"), *extra])


def test_a_prepared_corpus_is_named_once(tmp_path, prepared, capsys):
    data = ["--data", str(prepared), "--output", str(tmp_path / "run")]
    with pytest.raises(SystemExit):
        cli.main([*TRAIN, *data, "--data-dir", "somewhere"])
    assert "not allowed with argument --data" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="holds a prepared corpus: its dataset is 'prepared'"):
        cli.main([*TRAIN, *data, "--dataset", "multi30k"])


@pytest.mark.long(
    covered_by=[
        "tests/pipelines/test_tokenizer.py::test_wordpiece_vocabulary_and_round_trip",
        "tests/training/test_prepared_training.py::test_a_run_trains_on_the_shards_and_translates_evaluates_and_resumes",
    ]
)
def test_a_wordpiece_run_translates_and_exports_as_its_keras_translator(tmp_path, invented, capsys):
    """A run on shards of a WordPiece vocabulary holds it (`subwords.vocab.txt`); `translate`
    and the SavedModel, which tokenizes in the graph, decode as the Keras translator does."""
    prepared, run = tmp_path / "prepared", tmp_path / "run"
    assert cli.main([*invented, "--vocabulary", "wordpiece", "--output", str(prepared)]) == 0
    train = [*TRAIN[:4], "vocab_size=256", *TRAIN[5:], "--data", str(prepared)]
    assert cli.main([*train, "--output", str(run), "--max-steps", "3", "--bleu-every", "0"]) == 0
    assert (run / "subwords.vocab.txt").read_bytes() == prepared_vocabulary(prepared).read_bytes()
    assert not (run / "subwords.model").exists()
    translator = load_run(run)
    assert translator.tokenizer.kind == "wordpiece"

    sentences = (prepared / "test.source.txt").read_text(encoding="utf-8").splitlines()[:4]
    expected = translator.translate(sentences, SearchSettings(2, 0.6, extra_length=10))
    (tmp_path / "input.xx").write_text("".join(f"{s}\n" for s in sentences), encoding="utf-8")
    capsys.readouterr()
    beam = ["--beam", "2", "--extra-length", "10"]
    cli.main(["translate", "--model", str(run), "--input", str(tmp_path / "input.xx"), *beam])
    assert capsys.readouterr().out.splitlines() == expected

    cli.main(["export", "--model", str(run), "--output", str(tmp_path / "export"), *beam])
    assert (tmp_path / "export" / "1" / "assets" / "subwords.vocab.txt").is_file()
    serve = tf.saved_model.load(str(tmp_path / "export" / "1")).signatures["serving_default"]
    served = serve(text=tf.constant(sentences))["translations"].numpy()
    assert [text.decode("utf-8") for text in served] == expected
