"""The reference Marian checkpoints of tests/fixtures/marian (written by transformers, with its
own outputs beside them), imported once per test session, and the map from their ids to ours.

Other tests take them through conftest's `imported_run` fixture: `imported_run("classic")`
(swish, `</s>` id 0, pytorch_model.bin) or `imported_run("tc-big")` (relu, `</s>` mid-vocabulary,
`>>deu<<`/`>>fra<<` language tokens, model.safetensors) is the run directory.
"""

import json

import numpy as np

from keras_transformer.pretrained.importer import ImportOptions, import_checkpoint
from keras_transformer.pretrained.marian import MarianCheckpoint
from repo_paths import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "marian"
CHECKPOINTS = ("classic", "tc-big")


class ImportedRuns:
    """`runs(name, max_length=None)`: the run directory of checkpoint `name`, imported on first
    use into `directory`; `max_length` lowers the checkpoint's (`ImportOptions`), which makes
    the decoding cache and exports smaller."""

    def __init__(self, directory):
        self.directory = directory

    def __call__(self, name, max_length=None):
        run = self.directory / (name if max_length is None else f"{name}-max{max_length}")
        if not run.exists():
            import_checkpoint(FIXTURES / name, run, ImportOptions(max_length=max_length))
        return run


def reference(name) -> dict:
    """The checkpoint's reference.json: transformers' and CTranslate2's outputs."""
    return json.loads((FIXTURES / name / "reference.json").read_text(encoding="utf-8"))


def reference_tensors(name) -> dict[str, np.ndarray]:
    """reference.npz: input and decoder ids, encoder output and logits of a padded batch."""
    with np.load(FIXTURES / name / "reference.npz") as arrays:
        return dict(arrays)


def marian_order(name) -> np.ndarray:
    """Marian's id of each of our ids, as the importer orders them (-1: our new PAD)."""
    return MarianCheckpoint(FIXTURES / name).vocabulary_order()


def to_our_ids(name, marian_ids) -> np.ndarray:
    """Marian ids (any shape) as ours; Marian's `<pad>` stays our BOS, its pads in a padded
    batch are masked apart."""
    order = marian_order(name)
    ours = np.empty(len(order) - 1, np.int64)
    ours[order[1:]] = np.arange(1, len(order))
    return ours[np.asarray(marian_ids)]
