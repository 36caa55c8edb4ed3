"""The corpora the trainer reads, by name: each gives aligned text files per split.

- "multi30k": Multi30k Task 1 translation (`pipelines.multi30k`), "en" to "de", "fr" or "cs";
  splits train / validation / test_2016_flickr.
- "wmt14": WMT 2014 through TFDS (`pipelines.wmt14`, the paper's data, §5.1), "en" to "de" or
  "fr" (and back); splits train / validation (newstest2013) / test (newstest2014).
- "ptb": English constituency parsing on NLTK's Penn Treebank sample (`pipelines.ptb`, §6.3),
  "words" to "tree"; splits train / validation / test.
- "prepared": a corpus of any language pair that `keras-transformer prepare` tokenized into
  shards (`pipelines.prepare`); its languages are the manifest's, and its files here are the
  text of the splits it kept as text (validation, test), for BLEU. Prepared from one of the
  above (`prepare --dataset ptb`), it has that one's task (`task_dataset`).
"""

import dataclasses
from collections.abc import Callable
from pathlib import Path

from pipelines import multi30k, prepared, ptb, wmt14
from pipelines.corpus import CorpusError


@dataclasses.dataclass(frozen=True)
class Dataset:
    """How the trainer reads one corpus.

    corpus_files: `(data_dir, source_language, target_language) -> {split: (source, target)}`;
    languages: the default pair, or `data_dir -> pair` where the data says; test_split: the
    split results are reported on; vocabulary: the kind of its shared vocabulary, "bpe" or
    "word" (`pipelines.tokenizer.load_or_train_tokenizer`); data_dir: where it is read from
    unless `--data-dir` says (beside the checkout; none for a corpus that is downloaded);
    download: `() -> Path`, the directory the corpus is downloaded into where `data_dir` is
    missing."""

    corpus_files: Callable
    languages: tuple[str, str] | Callable[[Path], tuple[str, str]]
    test_split: str
    vocabulary: str = "bpe"
    data_dir: str | None = None
    download: Callable[[], Path] | None = None


DATASETS = {
    "multi30k": Dataset(
        multi30k.corpus_files,
        ("en", "de"),
        "test_2016_flickr",
        data_dir="../shared/data/multi30k",
        download=multi30k.download,
    ),
    "wmt14": Dataset(wmt14.corpus_files, ("en", "de"), "test"),
    # Words, as in Vinyals & Kaiser et al. (2015): one token per input word and per output
    # symbol ("(NP", ")", "XX").
    "ptb": Dataset(
        ptb.corpus_files,
        (ptb.SOURCE, ptb.TARGET),
        "test",
        "word",
        data_dir="../shared/data/ptb_sample",
    ),
    "prepared": Dataset(prepared.text_files_of_pair, prepared.languages, "test"),
}


def _dataset(name) -> Dataset:
    if name not in DATASETS:
        raise CorpusError(f"unknown dataset {name!r}; datasets: {sorted(DATASETS)}")
    return DATASETS[name]


def corpus_files(dataset, data_dir, source_language, target_language):
    """`{split: (source_path, target_path)}` of `dataset`; errors name what is missing."""
    return _dataset(dataset).corpus_files(data_dir, source_language, target_language)


def default_languages(dataset, data_dir=None) -> tuple[str, str]:
    languages = _dataset(dataset).languages
    return languages(data_dir) if callable(languages) else languages


def vocabulary_kind(dataset) -> str:
    """The `kind` of `dataset`'s shared vocabulary: "bpe" or "word"."""
    return _dataset(dataset).vocabulary


def task_dataset(dataset, data_dir) -> str:
    """The dataset whose task (and so search and scores) a run of `dataset` learns: for a
    prepared corpus the one it was prepared from, if any (ptb: parsing), else `dataset`."""
    if dataset == "prepared":
        return prepared.source_dataset(data_dir) or dataset
    return dataset


def default_split(dataset) -> str:
    """The split a dataset's results are reported on."""
    return _dataset(dataset).test_split


def default_data_dir(dataset) -> Path:
    """Where `dataset` is read from when `--data-dir` is not given: its directory beside the
    checkout, or where that is missing, the one it is downloaded into."""
    chosen = _dataset(dataset)
    if chosen.data_dir is None:
        raise CorpusError(
            f"dataset {dataset} needs a data_dir: the directory it is downloaded and prepared in"
        )
    if not Path(chosen.data_dir).is_dir() and chosen.download:
        return chosen.download()
    return Path(chosen.data_dir)
