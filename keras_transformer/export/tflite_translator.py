"""Translating with a TFLite export (`tflite.export_tflite`) as its tokenizer note says: the text
tokenized by the subword model (or an imported Marian model's SentencePiece models) beside it,
cut to the model's fixed source length with EOS kept, a batch of the size fixed at export a call
to LiteRT's interpreter (a short batch filled with copies of its last sentence), the ids up to
EOS detokenized.

This is the project's int8 path on a CPU (an export with `quantize="dynamic"`): LiteRT's XNNPACK
kernels multiply int8 weights faster than TensorFlow multiplies float32 ones, where TensorFlow's
own int8 kernels are slower (docs/PRETRAINED_PERFORMANCE.md). The search (beam, α, extra length,
length penalty) is the one fixed in the model at export; the note records it.

Example (needs an export, so not run as a doctest)::

    translator = TFLiteTranslator("saved_models/m30k-ende-int8/1/model.tflite")
    translator.translate(["A dog runs."])  # (["Ein Hund rennt."], array([-0.93], ...))
"""

import json
import logging
import threading
from pathlib import Path

import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from keras_transformer.export.layout import TFLITE_TOKENIZER_NOTE, tflite_tokenizer_directory
from keras_transformer.export.mapped_pages import drop_pages
from keras_transformer.search_settings import SearchSettings
from pipelines.marian_tokenizer import MarianTokenizer
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer

logger = logging.getLogger(__name__)


def read_tokenizer_note(path) -> dict:
    """The `TFLITE_TOKENIZER_NOTE` beside the TFLite model `path`; a missing model or note is a
    FileNotFoundError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no TFLite model at {path}")
    note = tflite_tokenizer_directory(path) / TFLITE_TOKENIZER_NOTE
    if not note.is_file():
        raise FileNotFoundError(
            f"{note} not found: `export --format tflite` writes the tokenizer files beside "
            f"{path.name}"
        )
    return json.loads(note.read_text(encoding="utf-8"))


class TFLiteTranslator:
    """Translates text with the TFLite model at `path` and the tokenizer files beside it.

    Args:
        path: the `.tflite` file (a server's version holds it as `layout.TFLITE_MODEL`).
        threads: the interpreter's threads (default: LiteRT's).

    Attributes:
        tokenizer: a `SubwordTokenizer` or `MarianTokenizer` of the files beside the model.
        source_length: the source width fixed at export, in subwords with EOS.
        batch_size: the sentences one interpreter call decodes, fixed at export.
        search: the `SearchSettings` fixed in the model, or None for an export that predates
            the note's record of it.

    One interpreter serves one call at a time: calls from several threads take turns. After the
    first call, which XNNPACK repacks the weights in, the pages of the model file it read them
    from are dropped from memory (`mapped_pages.drop_pages`; what it saves:
    docs/PRETRAINED_PERFORMANCE.md#many-models-in-one-server).
    """

    def __init__(self, path, threads=None):
        self.path = Path(path)
        note = read_tokenizer_note(self.path)
        directory = tflite_tokenizer_directory(self.path)
        if "vocabulary" in note:
            self.tokenizer = MarianTokenizer(directory)
        else:
            self.tokenizer = SubwordTokenizer(directory / note["subword_model"])
        self.source_length = note["source_length"]
        self.search = SearchSettings(**note["search"]) if "search" in note else None
        interpreter = Interpreter(model_path=str(self.path), num_threads=threads)
        self._translate = interpreter.get_signature_runner("translate")
        self.batch_size = int(self._translate.get_input_details()["source_ids"]["shape"][0])
        self._turn = threading.Lock()
        self._weights_packed = False

    def source_lengths(self, sentences) -> list[int]:
        """Each sentence's subwords with EOS, before the cut at `source_length`."""
        return [len(ids) + 1 for ids in self._pieces(sentences)]

    def source_ids(self, sentences) -> np.ndarray:
        """Source ids `[len(sentences), source_length]`: EOS-terminated, PAD after; a sentence
        longer than the model takes is cut, EOS kept, with a warning naming it."""
        rows = np.full([len(sentences), self.source_length], PAD_ID, np.int32)
        cut = []
        for row, ids in enumerate(self._pieces(sentences)):
            if len(ids) >= self.source_length:
                cut.append(row + 1)
                ids = ids[: self.source_length - 1]
            rows[row, : len(ids) + 1] = [*ids, EOS_ID]
        if cut:
            logger.warning(
                "%d sentence(s) longer than the %d subwords with EOS this TFLite model takes were "
                "cut (sentences %s)",
                len(cut),
                self.source_length,
                ", ".join(map(str, cut)),
            )
        return rows

    def translate_ids(self, source_ids) -> tuple[list[list[int]], np.ndarray]:
        """Each row's target ids (to EOS, without it) and score, `batch_size` rows a call."""
        targets, scores = [], []
        for start in range(0, len(source_ids), self.batch_size):
            rows = source_ids[start : start + self.batch_size]
            filled = np.concatenate([rows, np.repeat(rows[-1:], self.batch_size - len(rows), 0)])
            with self._turn:
                output = self._translate(source_ids=filled)
                self._drop_file_pages_once()
            for ids in output["target_ids"][: len(rows)].tolist():
                ids = ids[: ids.index(EOS_ID)] if EOS_ID in ids else ids
                targets.append([i for i in ids if i not in (PAD_ID, BOS_ID)])
            scores.append(output["scores"][: len(rows)])
        return targets, np.concatenate(scores) if scores else np.zeros([0], np.float32)

    def translate(self, sentences) -> tuple[list[str], np.ndarray]:
        """Each sentence's translation and score (log P / lp as the export's search scores it;
        log P for greedy decoding)."""
        sentences = list(sentences)
        if not sentences:
            return [], np.zeros([0], np.float32)
        targets, scores = self.translate_ids(self.source_ids(sentences))
        texts = self.tokenizer.detokenize(tf.ragged.constant(targets, tf.int32, ragged_rank=1))
        return [text.decode("utf-8", "replace") for text in texts.numpy()], scores

    def _drop_file_pages_once(self):
        if not self._weights_packed:
            self._weights_packed = True
            dropped = drop_pages(self.path)
            logger.debug("dropped %.1f MiB of %s's pages", dropped / 2**20, self.path)

    def _pieces(self, sentences) -> list[list[int]]:
        return self.tokenizer.tokenize(tf.constant(list(sentences), tf.string)).to_list()
