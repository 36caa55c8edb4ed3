"""Fixtures for the pipeline tests: a slice of real Multi30k and a subword model trained on it."""

import gzip

import pytest

from pipelines import train_sentencepiece
from pipelines.tokenizer import SubwordTokenizer

SLICE = 3000


@pytest.fixture(scope="session")
def train_slice(tmp_path_factory, multi30k_dir):
    """The first lines of train.{en,de}.gz as an aligned pair of files."""
    directory = tmp_path_factory.mktemp("slice")
    paths = []
    for language in ("en", "de"):
        with gzip.open(multi30k_dir / f"train.{language}.gz", "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(SLICE)]
        path = directory / f"train.{language}.gz"
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.writelines(lines)
        paths.append(path)
    return tuple(paths)


@pytest.fixture(scope="session")
def subword_model(tmp_path_factory, train_slice):
    path = tmp_path_factory.mktemp("vocab") / "subwords.model"
    return train_sentencepiece(train_slice, path, vocab_size=2000)


@pytest.fixture(scope="module")
def tokenizer(subword_model):
    """A tokenizer a module: tests outside this folder seed Keras, which deletes the
    SentencePiece resource of a tokenizer created before (see `_seed`), and pytest-xdist may
    run such tests between two modules of this folder."""
    return SubwordTokenizer(subword_model)


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding here: `keras.utils.set_random_seed` clears TensorFlow's eager kernel
    caches, which deletes the SentencePiece resource of a tokenizer created earlier."""
