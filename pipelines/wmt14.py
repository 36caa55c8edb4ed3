"""WMT 2014 English-German and English-French, the paper's data (§5.1), through TFDS.

`keras-transformer train --dataset wmt14 --data-dir DIR` reads it: `corpus_files` has TFDS
download and prepare `wmt14_translate/de-en` (or `fr-en`) in DIR on first use (several GB; it
needs internet access, or a `manual_dir` holding the files TFDS names), then writes each split
once as aligned text files under `DIR/wmt14_text/<pair>/` for the trainer. The splits are TFDS's:
train, validation (newstest2013, the paper's development set, §6.2) and test (newstest2014, on
which §6.1 reports). The tests do not download the corpus: they stop at the builder and run
the export on a stand-in.
"""

import os
from pathlib import Path

import tensorflow_datasets as tfds

from pipelines.corpus import CorpusError

PAIRS = {("en", "de"): "de-en", ("en", "fr"): "fr-en", ("de", "en"): "de-en", ("fr", "en"): "fr-en"}
SPLITS = ("train", "validation", "test")


def wmt14_builder(source_language, target_language, data_dir=None):
    """The TFDS builder of WMT14 for this language pair."""
    try:
        config = PAIRS[(source_language, target_language)]
    except KeyError:
        raise CorpusError(
            f"WMT14 has no {source_language}-{target_language} pair; pairs: {sorted(PAIRS)}"
        ) from None
    return tfds.builder(f"wmt14_translate/{config}", data_dir=data_dir)


def corpus_files(data_dir, source_language, target_language, builder=None):
    """`{split: (source_path, target_path)}`, prepared and written on first use (see the module
    docstring); `builder` replaces the TFDS builder of the pair (tests)."""
    builder = builder or wmt14_builder(source_language, target_language, str(data_dir))
    directory = Path(data_dir) / "wmt14_text" / builder.builder_config.name
    languages = (source_language, target_language)
    files = {split: tuple(directory / f"{split}.{lang}" for lang in languages) for split in SPLITS}
    if not all(path.is_file() for pair in files.values() for path in pair):
        try:
            builder.download_and_prepare()
        except Exception as error:  # TFDS raises network, checksum and manual-dir errors alike
            raise CorpusError(
                f"WMT14 {builder.builder_config.name} could not be prepared in {data_dir}: "
                f"{error}. It needs internet access, or the files TFDS names in a manual_dir."
            ) from error
        for split, paths in files.items():
            write_split(builder, split, languages, paths)
    return files


def write_split(builder, split, languages, paths):
    """Writes one prepared split as aligned text files, one sentence a line; each file under a
    temporary name first, so an interrupted export is written again rather than read."""
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    partials = [path.with_name(f"{path.name}.{os.getpid()}.partial") for path in paths]
    files = [partial.open("w", encoding="utf-8") for partial in partials]
    try:
        for example in tfds.as_numpy(builder.as_dataset(split=split)):
            for file, language in zip(files, languages, strict=True):
                # A sentence must stay one line: the files are aligned by line number.
                file.write(" ".join(example[language].decode("utf-8").split()) + "\n")
    finally:
        for file in files:
            file.close()
    for partial, path in zip(partials, paths, strict=True):
        partial.replace(path)
