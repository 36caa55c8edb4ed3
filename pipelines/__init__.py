"""tf.data input for keras-transformer (§5.1): corpora, subwords, token-budget batches."""

from pipelines.batching import bucket_by_token_budget, padding_efficiency
from pipelines.corpus import CorpusError, ParallelCorpus, read_parallel_corpus
from pipelines.datasets import DATASETS, corpus_files, vocabulary_kind
from pipelines.multi30k import Multi30k
from pipelines.ptb import PennTreebankSample
from pipelines.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    SubwordTokenizer,
    check_sentencepiece_model,
    load_or_train_tokenizer,
    train_sentencepiece,
    train_wordpiece,
)
from pipelines.translation_dataset import count_over_length, make_translation_dataset

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "DATASETS",
    "CorpusError",
    "Multi30k",
    "ParallelCorpus",
    "PennTreebankSample",
    "SubwordTokenizer",
    "bucket_by_token_budget",
    "check_sentencepiece_model",
    "corpus_files",
    "count_over_length",
    "load_or_train_tokenizer",
    "make_translation_dataset",
    "padding_efficiency",
    "read_parallel_corpus",
    "train_sentencepiece",
    "train_wordpiece",
    "vocabulary_kind",
]
