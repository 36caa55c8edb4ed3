"""The options of `pipelines.prepare.prepare`: where the corpus is, and how it is tokenized.

Here, not in `pipelines`, so that the command line builds its flags from them without loading
TensorFlow (and `pipelines` knows nothing of `keras_transformer`). `prepare` checks the values
and raises `pipelines.corpus.CorpusError`.

Example:
>>> split_names("train=train,validation=newstest2013")
{'train': 'train', 'validation': 'newstest2013'}
>>> PrepareOptions(vocab_size=4000).vocab_size
4000
"""

import dataclasses
from pathlib import Path


def split_names(text: str) -> dict[str, str]:
    """ "train=train,validation=newstest2013" → {"train": "train", "validation": ...}."""
    names = dict(item.partition("=")[::2] for item in text.split(","))
    if not all(names) or not all(names.values()):
        raise ValueError(f"{text!r} is not SPLIT=TFDS_SPLIT[,...]")
    return names


def _option(default, help, **metadata):
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


@dataclasses.dataclass(frozen=True)
class CorpusOptions:
    """Where `prepare` reads a corpus from: exactly one of `train`, `tsv`, `tfds_name` or
    `dataset`, with its other splits (`corpus_description`). The `help` of each field documents
    it; `keras-transformer prepare`'s flags are generated from them."""

    train: tuple[Path, Path] | None = _option(
        None,
        "aligned training files, one sentence a line, plain or .gz; any language pair",
        nargs=2,
        metavar=("SRC", "TGT"),
    )
    tsv: Path | None = _option(None, "training pairs: SRC<TAB>TGT", metavar="FILE")
    tfds_name: str | None = _option(
        None, "a TensorFlow Datasets translation dataset", flag="--tfds", metavar="NAME[/CONFIG]"
    )
    dataset: str | None = _option(
        None, "multi30k, wmt14 or ptb, as `train --dataset` reads them, with their splits"
    )
    validation: list[Path] | None = _option(
        None, "validation files: SRC TGT with train, one TSV file with tsv", metavar="FILE"
    )
    test: list[Path] | None = _option(
        None, "test files: SRC TGT with train, one TSV file with tsv", metavar="FILE"
    )
    tfds_data_dir: Path | None = _option(None, "where TFDS keeps its datasets")
    data_dir: Path | None = _option(None, "the dataset's directory: where it is (or goes)")
    splits: dict | None = _option(
        None,
        "tfds: the splits to prepare, by TFDS name (default train, and validation and test "
        "where it has them)",
        type=split_names,
        metavar="SPLIT=TFDS_SPLIT,...",
    )
    source_language: str | None = _option(
        None, "source language: a label; for tfds, its feature", flag="--src-lang"
    )
    target_language: str | None = _option(
        None, "target language: a label; for tfds, its feature", flag="--tgt-lang"
    )

    def description(self):
        """The corpus as `pipelines.prepare.prepare` takes it (`corpus_description`)."""
        from pipelines.prepare import corpus_description

        fields = dataclasses.asdict(self)
        languages = (fields.pop("source_language"), fields.pop("target_language"))
        return corpus_description(**fields, languages=languages)


@dataclasses.dataclass(frozen=True)
class PrepareOptions:
    """How `prepare` tokenizes and shards a corpus: `prepare(output, corpus,
    **dataclasses.asdict(options))`, which checks them. The `help` of each field documents it;
    `keras-transformer prepare`'s flags are generated from them."""

    vocabulary: str | None = _option(
        None,
        "the vocabulary's kind (default bpe, §5.1, or word for ptb, §6.3)",
        choices=["bpe", "unigram", "word", "wordpiece"],
    )
    vocab_size: int = _option(8000, "entries of the shared vocabulary")
    max_length: int = _option(256, "drop (and count) pairs with a longer side, EOS included")
    shard_pairs: int = _option(100_000, "pairs read into one shard")
    sample_sentences: int = _option(
        1_000_000, "the vocabulary learns from a random sample of this many training sentences"
    )
    lowercase: bool = _option(False, "a case-folding vocabulary (bpe or unigram)")
    subwords: Path | None = _option(
        None,
        "a SentencePiece model to use rather than learn one: a teacher run's subwords.model for "
        "the pairs it distilled, which its student resumes on",
        metavar="FILE",
    )
    tokenizer_from: Path | None = _option(
        None,
        "an imported model's run whose tokenizers (source.spm, target.spm, vocabulary.txt) "
        "tokenize the corpus, for `train --init-from` that run",
        metavar="RUN",
    )
