"""Shared test fixtures: the real data beside the checkout, and quiet, seeded TensorFlow."""

import collections
import gzip
import json
from pathlib import Path

from keras_transformer import runtime

# As the CLI does: TensorFlow's allocator and XLA flags, and its start-up notes kept quiet.
runtime.configure()

import keras  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import Transformer, TransformerConfig  # noqa: E402
from keras_transformer.training.distribution import configure_logical_cpus  # noqa: E402
from pipelines import train_sentencepiece  # noqa: E402
from pipelines.corpus import read_lines  # noqa: E402
from pipelines.ptb import split_treebank  # noqa: E402
from repo_paths import MULTI30K_DIR, PTB_DIR  # noqa: E402

# 8 logical CPU devices, as the paper's 8 GPUs, for the MirroredStrategy tests. This must happen
# before TensorFlow initialises its devices, hence at import of the conftest.
configure_logical_cpus(8)


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """`../shared/data/multi30k` beside the checkout, or $KT_DATA_DIR."""
    if not MULTI30K_DIR.is_dir():
        pytest.fail(f"Multi30k data not found at {MULTI30K_DIR}; set KT_DATA_DIR")
    return MULTI30K_DIR


@pytest.fixture(scope="session")
def ptb_dir() -> Path:
    """`../shared/data/ptb_sample` (NLTK's treebank.zip) beside the checkout, or $KT_PTB_DIR."""
    if not (PTB_DIR / "treebank.zip").is_file():
        pytest.fail(f"the Penn Treebank sample is not at {PTB_DIR}/treebank.zip; set KT_PTB_DIR")
    return PTB_DIR


@pytest.fixture(scope="session")
def ptb_splits(ptb_dir):
    """The preprocessed trees of each split (read once: NLTK's reader takes seconds)."""
    return split_treebank(ptb_dir)


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory, multi30k_dir):
    """A run directory as training leaves it: config, subword model, final weights."""
    directory = tmp_path_factory.mktemp("run")
    text = directory / "text.gz"
    with gzip.open(text, "wt", encoding="utf-8") as f:
        for language in ("en", "de"):
            f.writelines(line + "\n" for line in read_lines(multi30k_dir / f"val.{language}.gz"))
    train_sentencepiece([text], directory / "subwords.model", vocab_size=500)
    config = TransformerConfig.preset("tiny", vocab_size=500, max_length=24)
    (directory / "config.json").write_text(config.to_json())
    (directory / "run.json").write_text(
        json.dumps({"source_language": "en", "target_language": "de"})
    )
    tf.keras.utils.set_random_seed(5)
    Transformer(config).save_weights(directory / "model.weights.h5")
    return directory


@pytest.fixture(scope="session")
def multi30k_slice(tmp_path_factory, multi30k_dir):
    """The first lines of each Multi30k split, written as a data directory of its own."""
    directory = tmp_path_factory.mktemp("multi30k_slice")
    for split, lines in {"train": 1200, "val": 40, "test_2016_flickr": 40}.items():
        for language in ("en", "de"):
            with gzip.open(multi30k_dir / f"{split}.{language}.gz", "rt", encoding="utf-8") as f:
                head = [next(f) for _ in range(lines)]
            with gzip.open(directory / f"{split}.{language}.gz", "wt", encoding="utf-8") as f:
                f.writelines(head)
    return directory


@pytest.fixture(scope="session")
def dog_captions(tmp_path_factory, multi30k_dir):
    """An in-domain corpus for fine-tuning: the Multi30k pairs whose English caption has the
    word "dog" (about 1,400 of train, 50 of val and of test_2016_flickr), as a data directory."""
    directory = tmp_path_factory.mktemp("dog_captions")
    for split in ("train", "val", "test_2016_flickr"):
        english, german = (read_lines(multi30k_dir / f"{split}.{side}.gz") for side in ("en", "de"))
        about_dogs = [i for i, caption in enumerate(english) if "dog" in caption.lower().split()]
        for language, lines in (("en", english), ("de", german)):
            with gzip.open(directory / f"{split}.{language}.gz", "wt", encoding="utf-8") as f:
                f.writelines(f"{lines[i]}\n" for i in about_dogs)
    return directory


@pytest.fixture
def first_lines_data(multi30k_dir, tmp_path):
    """The first 4 lines of each Multi30k split, as a data directory of its own."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        for language in ("en", "de"):
            name = f"{split}.{language}.gz"
            with gzip.open(multi30k_dir / name, "rt") as full, gzip.open(data / name, "wt") as part:
                part.writelines(next(full) for _ in range(4))
    return data


@pytest.fixture(scope="session")
def exported(run_dir, tmp_path_factory):
    """`run_dir` exported by the CLI as version 1 of a SavedModel base path."""
    from keras_transformer import cli

    base = tmp_path_factory.mktemp("saved_models") / "m30k-ende"
    cli.main(["export", "--model", str(run_dir), "--output", str(base)])
    return base


@pytest.fixture(scope="session")
def imported_run(tmp_path_factory):
    """`imported_run(name, max_length=None)`: the reference Marian checkpoint
    tests/fixtures/marian/<name> ("classic", "tc-big") imported once a session; its run
    directory (tests/imported_runs.py)."""
    from imported_runs import ImportedRuns

    return ImportedRuns(tmp_path_factory.mktemp("imported"))


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)


def pytest_collection_modifyitems(config, items):
    """Files with the most tests marked slow first, the order within each file kept.

    `make test` hands each worker a whole file at a time (`--dist loadfile`, in this order:
    `--no-loadscope-reorder`); the long training and export files taken last would leave the
    other core idle at the end while one worker runs them.
    """
    slow = collections.Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])
