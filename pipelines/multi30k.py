"""Multi30k Task 1 (Elliott et al., 2016): EN→DE / FR / CS image-caption translation.

The raw files (`{train,val,test_2016_flickr}.{en,de,fr,cs}.gz`) are read from a local data
directory (by default `../shared/data/multi30k` beside the checkout). Where that directory is
missing, `download` fetches them from the public repository `multi30k/dataset` (URL below) with
TensorFlow Datasets' download manager, as the `Multi30k` builder does, into a cache directory
(`$KT_DATA_HOME/multi30k`, by default `~/.cache/keras-transformer/multi30k`). `corpus_files`
gives the file pairs for the trainer; `Multi30k` exposes the same data as a TFDS builder.
"""

import logging
import os
import shutil
from pathlib import Path

import tensorflow_datasets as tfds

from durable_files import write_atomically
from pipelines.corpus import CorpusError, read_parallel_corpus

logger = logging.getLogger(__name__)

DOWNLOAD_URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/{file}"
SPLIT_FILES = {"train": "train", "validation": "val", "test_2016_flickr": "test_2016_flickr"}
LANGUAGES = ("en", "de", "fr", "cs")


def corpus_files(data_dir, source_language, target_language):
    """`{split: (source_path, target_path)}` of one language pair; errors name a missing path."""
    for language in (source_language, target_language):
        if language not in LANGUAGES:
            raise CorpusError(f"Multi30k has no language {language!r}; it has {LANGUAGES}")
    data_dir = Path(data_dir)
    files = {
        split: tuple(data_dir / f"{stem}.{lang}.gz" for lang in (source_language, target_language))
        for split, stem in SPLIT_FILES.items()
    }
    missing = [str(p) for pair in files.values() for p in pair if not p.is_file()]
    if missing:
        raise CorpusError(
            f"Multi30k files missing: {missing}; download them from "
            f"{DOWNLOAD_URL.format(file='<file>')} into {data_dir}"
        )
    return files


def raw_file_names(languages=LANGUAGES) -> list[str]:
    return [f"{stem}.{lang}.gz" for stem in SPLIT_FILES.values() for lang in languages]


def download_urls(languages=LANGUAGES) -> dict[str, str]:
    return {name: DOWNLOAD_URL.format(file=name) for name in raw_file_names(languages)}


def cache_dir() -> Path:
    """Where `download` puts the raw files: `$KT_DATA_HOME/multi30k`."""
    home = os.environ.get("KT_DATA_HOME", Path.home() / ".cache" / "keras-transformer")
    return Path(home) / "multi30k"


def download(data_dir=None, manager=None) -> Path:
    """The raw files of every language in `data_dir` (default `cache_dir()`), fetched with TFDS's
    download manager unless they are there already; returns the directory.

    `manager`: a `tfds.download.DownloadManager` (one downloading into `data_dir/downloads` by
    default). Each file is renamed into place only once complete.
    """
    data_dir = Path(data_dir or cache_dir())
    names = raw_file_names()
    if all((data_dir / name).is_file() for name in names):
        return data_dir
    logger.info("downloading Multi30k into %s from %s", data_dir, DOWNLOAD_URL.format(file=""))
    data_dir.mkdir(parents=True, exist_ok=True)
    manager = manager or tfds.download.DownloadManager(download_dir=str(data_dir / "downloads"))
    for name, path in manager.download(download_urls()).items():
        write_atomically(data_dir / name, lambda partial, path=path: shutil.copyfile(path, partial))
    return data_dir


class Multi30kConfig(tfds.core.BuilderConfig):
    def __init__(self, source_language, target_language, **kwargs):
        super().__init__(
            name=f"{source_language}-{target_language}",
            description=f"Multi30k Task 1, {source_language} to {target_language}",
            **kwargs,
        )
        self.source_language = source_language
        self.target_language = target_language


class Multi30k(tfds.core.GeneratorBasedBuilder):
    """Multi30k Task 1 as TFDS splits train / validation / test_2016_flickr.

    Built from a local directory holding the raw files (`data_dir` argument of
    `download_and_prepare`'s `download_config.manual_dir`), or downloaded from the public
    repository when that directory is not given.

    Example (prepares the data on disk, so not run as a doctest)::

        builder = Multi30k(config="en-de", data_dir="/tmp/tfds")
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir="../shared/data/multi30k"))
        builder.as_dataset(split="validation")  # {"en": tf.string, "de": tf.string}
    """

    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [Multi30kConfig("en", target) for target in ("de", "fr", "cs")]
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Place the raw Multi30k Task 1 files ({train,val,test_2016_flickr}.{en,de,fr,cs}.gz) "
        f"from {DOWNLOAD_URL.format(file='<file>')} in the manual directory."
    )

    def _info(self):
        languages = (self.builder_config.source_language, self.builder_config.target_language)
        return self.dataset_info_from_configs(
            features=tfds.features.Translation(languages=languages),
            supervised_keys=languages,
            homepage="https://github.com/multi30k/dataset",
        )

    def _split_generators(self, dl_manager):
        config = self.builder_config
        directory = _manual_directory(dl_manager)
        if directory is not None:
            files = corpus_files(directory, config.source_language, config.target_language)
        else:
            languages = (config.source_language, config.target_language)
            paths = dl_manager.download(download_urls(languages))
            files = {
                split: tuple(
                    Path(paths[f"{stem}.{lang}.gz"])
                    for lang in (config.source_language, config.target_language)
                )
                for split, stem in SPLIT_FILES.items()
            }
        return {split: self._generate_examples(*pair) for split, pair in files.items()}

    def _generate_examples(self, source_path, target_path):
        corpus = read_parallel_corpus(source_path, target_path)
        source_language = self.builder_config.source_language
        target_language = self.builder_config.target_language
        for index, (source, target) in enumerate(zip(corpus.source, corpus.target, strict=True)):
            yield index, {source_language: source, target_language: target}


def _manual_directory(dl_manager) -> Path | None:
    """The manual directory with the raw files, or None where it was not given: TFDS's
    `manual_dir` raises rather than return nothing for a builder with manual instructions."""
    try:
        directory = Path(dl_manager.manual_dir)
    except AssertionError:
        return None
    return directory if directory.is_dir() else None
