"""WMT 2014 English-German and English-French, the paper's data (§5.1), through TFDS.

`tfds.load("wmt14_translate/de-en")` downloads and prepares the corpus (several GB) on first
use; it needs internet access or a `manual_dir` holding the files TFDS names. This machine
cannot download it, so the code path is real but exercised only up to the builder.
"""

from pathlib import Path

import tensorflow_datasets as tfds

PAIRS = {("en", "de"): "de-en", ("en", "fr"): "fr-en", ("de", "en"): "de-en", ("fr", "en"): "fr-en"}


def wmt14_builder(source_language, target_language, data_dir=None):
    """The TFDS builder of WMT14 for this language pair."""
    try:
        config = PAIRS[(source_language, target_language)]
    except KeyError:
        raise ValueError(
            f"WMT14 has no {source_language}-{target_language} pair; pairs: {sorted(PAIRS)}"
        ) from None
    return tfds.builder(f"wmt14_translate/{config}", data_dir=data_dir)


def export_wmt14_text(source_language, target_language, split, output_dir, data_dir=None):
    """Writes a prepared WMT14 split as two aligned text files for `make_translation_dataset`."""
    builder = wmt14_builder(source_language, target_language, data_dir)
    builder.download_and_prepare()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = [output_dir / f"{split}.{lang}" for lang in (source_language, target_language)]
    with (
        paths[0].open("w", encoding="utf-8") as source,
        paths[1].open("w", encoding="utf-8") as target,
    ):
        for example in tfds.as_numpy(builder.as_dataset(split=split)):
            source.write(example[source_language].decode("utf-8").replace("\n", " ") + "\n")
            target.write(example[target_language].decode("utf-8").replace("\n", " ") + "\n")
    return paths
