"""`prepare --dataset ptb`: the parsing corpus of §6.3 on NLTK's whole WSJ sample, tokenized once
with the word vocabulary that `train --dataset ptb` learns, streams the very batches that the
text path makes, and a run on it is a parser."""

import numpy as np
import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.training.data import prepared_shards, text_files
from keras_transformer.training.trainer import TrainingRun
from pipelines.batching import BatchingSettings
from pipelines.corpus import CorpusError, read_aligned_lines
from pipelines.prepare import TextPairs, corpus_description, prepare
from pipelines.prepared import prepared_dataset, read_manifest
from pipelines.translation_dataset import make_translation_dataset

CONFIG = TransformerConfig.preset("parsing")
BATCH_TOKENS = CONFIG.batch_tokens


@pytest.fixture(scope="module")
def ptb(tmp_path_factory, ptb_dir):
    """The training data of a `train --dataset ptb` run and of a `train --data` run on
    `prepare --dataset ptb` (the preset's vocabulary size and maximum length)."""
    directory = tmp_path_factory.mktemp("ptb")
    with pytest.MonkeyPatch.context() as patch:  # the treebank's text files, cached here
        patch.setenv("KT_CACHE_DIR", str(directory / "cache"))
        corpus = corpus_description(dataset="ptb", data_dir=ptb_dir)
        prepared = directory / "prepared"
        prepare(prepared, corpus, vocab_size=CONFIG.vocab_size, max_length=CONFIG.max_length)
        runs = {
            "text": TrainingRun(directory / "text", ptb_dir, "ptb", "words", "tree"),
            "prepared": TrainingRun(directory / "shards", prepared, "prepared", "words", "tree"),
        }
        for run in runs.values():
            run.output.mkdir()  # as `train` makes it before it reads the data
        data = {
            "text": text_files(runs["text"], CONFIG, BATCH_TOKENS),
            "prepared": prepared_shards(runs["prepared"], CONFIG, BATCH_TOKENS),
        }
    return runs, data, prepared


def batches(dataset) -> list:
    """The batches of a dataset in order, each as its three arrays (padding included)."""
    return [
        tuple((array.shape, array.tobytes()) for array in (*inputs, target_out))
        for inputs, target_out in dataset.as_numpy_iterator()
    ]


def test_prepare_learns_the_word_vocabulary_of_the_text_path(ptb):
    runs, data, prepared = ptb
    manifest = read_manifest(prepared)
    assert manifest["corpus"]["dataset"] == "ptb"
    assert manifest["vocabulary"]["kind"] == "word"
    assert manifest["languages"] == {"source": "words", "target": "tree"}
    text, shards = data["text"].tokenizer, data["prepared"].tokenizer
    assert shards.one_id_per_word and shards.vocab_size == CONFIG.vocab_size
    assert shards.pieces(range(shards.vocab_size)) == text.pieces(range(text.vocab_size))
    # Both runs are parsers: §6.3's search and F1.
    assert runs["text"].task_dataset == runs["prepared"].task_dataset == "ptb"


def test_epochs_buckets_and_evaluation_text_are_the_text_paths(ptb):
    _, data, _ = ptb
    text, shards = data["text"], data["prepared"]
    assert np.array_equal(text.length_counts, shards.length_counts)
    for split in ("validation", "test"):
        assert read_aligned_lines(*shards.text_files[split]) == read_aligned_lines(
            *text.text_files[split]
        )


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_every_split_streams_the_batches_of_the_text_path(ptb, split):
    """The same padded batches, ids and all, in the same order (read in order: no shuffle)."""
    _, data, prepared = ptb
    max_length = CONFIG.max_length
    text = data["text"].text_files[split]
    from_text = make_translation_dataset(
        *text,
        data["text"].tokenizer,
        BatchingSettings(BATCH_TOKENS, max_length, deterministic=True),
    )
    from_shards = prepared_dataset(
        prepared, split, BatchingSettings(BATCH_TOKENS, max_length, deterministic=True)
    )
    assert from_shards.element_spec == from_text.element_spec
    assert batches(from_shards) == batches(from_text)
    if split != "train":  # as the trainer reads them for the validation loss
        assert batches(data["prepared"].batches(split)) == batches(data["text"].batches(split))


def test_ptb_takes_only_a_word_vocabulary(tmp_path):
    corpus = TextPairs({}, ("words", "tree"), dataset="ptb")
    with pytest.raises(CorpusError, match="ptb needs a word vocabulary .* not bpe"):
        prepare(tmp_path / "out", corpus, "bpe", vocab_size=CONFIG.vocab_size)
    assert not (tmp_path / "out").exists()
