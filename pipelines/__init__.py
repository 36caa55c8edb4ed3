"""tf.data input for keras-transformer (§5.1): corpora, subwords, token-budget batches.

Importing the package loads nothing else: TensorFlow, tensorflow-text and TFDS are loaded with
the submodule that needs them, when a name below is first used (PEP 562), so that importing one
small module of it (`pipelines.corpus`) stays cheap.
"""

import importlib

_PUBLIC = {
    "BOS_ID": "pipelines.tokenizer",
    "EOS_ID": "pipelines.tokenizer",
    "PAD_ID": "pipelines.tokenizer",
    "UNK_ID": "pipelines.tokenizer",
    "DATASETS": "pipelines.datasets",
    "CorpusError": "pipelines.corpus",
    "MarianTokenizer": "pipelines.marian_tokenizer",
    "Multi30k": "pipelines.multi30k",
    "ParallelCorpus": "pipelines.corpus",
    "PennTreebankSample": "pipelines.ptb",
    "SubwordTokenizer": "pipelines.tokenizer",
    "bucket_by_token_budget": "pipelines.batching",
    "check_sentencepiece_model": "pipelines.tokenizer",
    "corpus_files": "pipelines.datasets",
    "holds_marian_tokenizer": "pipelines.marian_tokenizer",
    "count_over_length": "pipelines.translation_dataset",
    "load_or_train_tokenizer": "pipelines.tokenizer",
    "make_translation_dataset": "pipelines.translation_dataset",
    "padding_efficiency": "pipelines.batching",
    "read_parallel_corpus": "pipelines.corpus",
    "train_sentencepiece": "pipelines.tokenizer",
    "train_wordpiece": "pipelines.tokenizer",
    "vocabulary_kind": "pipelines.datasets",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'pipelines' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_PUBLIC])
