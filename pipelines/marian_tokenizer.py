"""The tokenizers of a pretrained Marian (OPUS-MT) model, in the graph: two SentencePiece models
over one shared vocabulary.

An OPUS-MT model segments its source with one SentencePiece model (`source.spm`) and its target
with another (`target.spm`); the pieces of both index one vocabulary (Marian's `vocab.json`),
whose rows are the model's shared embedding. Multilingual models also read a target-language
token (`>>fra<<`) at the start of the source, looked up whole, as Hugging Face's
`MarianTokenizer` does.

A run directory imported from such a model holds

    source.spm        the source SentencePiece model
    target.spm        the target SentencePiece model
    vocabulary.txt    the shared vocabulary in this package's id order, one piece a line

This package reserves PAD = 0, BOS = 1, EOS = 2 and UNK = 3 (`pipelines.tokenizer`), where
Marian numbers its pieces otherwise; the importer writes `vocabulary.txt` in this package's order,
so that ids 0-3 are those four whatever their pieces are called.

Tokenizing looks each piece up by its text, as Hugging Face's `MarianTokenizer` does: a piece
the vocabulary lacks reads as UNK, and a character unknown to one SentencePiece model keeps its
own text, which the shared vocabulary may hold. Detokenizing maps vocabulary ids to the target
model's ids (a piece it lacks reads as its UNK) and lets SentencePiece decode them. The interface
is `SubwordTokenizer`'s: strings in, strings out, all in the graph.
"""

import re
import zlib
from pathlib import Path

import tensorflow as tf
import tensorflow_text as tf_text

from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, starts_of_words

SOURCE_MODEL, TARGET_MODEL, VOCABULARY = "source.spm", "target.spm", "vocabulary.txt"
# A target-language token, as `MarianTokenizer.language_code_re` finds it at a source's start.
LANGUAGE_TOKEN = r">>.+<<"


def holds_marian_tokenizer(directory) -> bool:
    """Whether `directory` holds the files of a `MarianTokenizer`."""
    return all((Path(directory) / name).is_file() for name in (SOURCE_MODEL, TARGET_MODEL))


def read_vocabulary(path) -> list[str]:
    """The pieces of a `vocabulary.txt`, in id order."""
    return Path(path).read_text(encoding="utf-8").split("\n")[:-1]


class MarianTokenizer(tf.Module):
    """Source strings → ids with `source.spm`, ids → target strings with `target.spm`, over one
    shared vocabulary (see the module doc).

    Args:
        directory: holds source.spm, target.spm and vocabulary.txt.

    It offers what `SubwordTokenizer` offers, with `tokenize` for sources and `tokenize_target`
    for targets (which a shared subword model tokenizes alike).

    Example (needs an imported model, so not run as a doctest)::

        tokenizer = MarianTokenizer("runs/opus-mt-en-de")
        ids = tokenizer.tokenize(tf.constant([">>deu<< A dog runs."]))
        tokenizer.detokenize(model_output_ids)
    """

    kind = "marian"
    lowercase = False  # SentencePiece's normalization is inside the models
    one_id_per_word = False

    def __init__(self, directory):
        super().__init__(name="marian_tokenizer")
        directory = Path(directory)
        self.path = directory / VOCABULARY
        for name in (SOURCE_MODEL, TARGET_MODEL, VOCABULARY):
            if not (directory / name).is_file():
                raise FileNotFoundError(
                    f"{directory / name} not found: {directory} holds no imported Marian tokenizer"
                )
        self.vocabulary = read_vocabulary(self.path)
        self.vocab_size = len(self.vocabulary)
        self.source_asset = tf.saved_model.Asset(str(directory / SOURCE_MODEL))
        self.target_asset = tf.saved_model.Asset(str(directory / TARGET_MODEL))
        self.vocabulary_asset = tf.saved_model.Asset(str(self.path))
        self._source = _sentencepiece(directory / SOURCE_MODEL, tf.string)
        self._target = _sentencepiece(directory / TARGET_MODEL, tf.string)
        self._target_ids = _sentencepiece(directory / TARGET_MODEL, tf.int32)
        self._ids = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.vocabulary), tf.range(self.vocab_size, dtype=tf.int32)
            ),
            default_value=UNK_ID,
        )
        self._vocabulary_to_target = tf.constant(self._vocabulary_to_sentencepiece())
        languages = [piece for piece in self.vocabulary if re.fullmatch(LANGUAGE_TOKEN, piece)]
        self.target_languages = [piece[2:-2] for piece in languages]
        self._language_tokens = tf.constant(languages, tf.string, shape=[len(languages)])
        self._language_ids = tf.constant(
            [self.vocabulary.index(piece) for piece in languages], tf.int32, shape=[len(languages)]
        )

    def tokenize(self, strings):
        """Source sentences `[batch]` tf.string → int32 RaggedTensor `[batch, (tokens)]`, no EOS.

        A leading `>>lang<<` token is one id; the rest goes through `source.spm`.
        """
        code = tf.strings.regex_replace(strings, f"^({LANGUAGE_TOKEN})?.*", r"\1")
        text = tf.strings.regex_replace(strings, f"^{LANGUAGE_TOKEN}", "")
        pieces = self._vocabulary_ids(self._source, text)
        matches = tf.equal(code[:, None], self._language_tokens[None, :])
        known = tf.reduce_any(matches, axis=1)
        # At most one token matches; a sum, unlike an argmax, also holds without any.
        matched_id = tf.reduce_sum(tf.cast(matches, tf.int32) * self._language_ids[None, :], axis=1)
        code_id = tf.where(known, matched_id, UNK_ID)
        # A `>>lang<<` the vocabulary lacks reads as UNK, as `MarianTokenizer` reads it.
        code_ids = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(code_id, code != ""), tf.cast(code != "", tf.int64)
        )
        return tf.concat([code_ids, pieces], axis=1)

    def tokenize_target(self, strings):
        """Target sentences `[batch]` tf.string → int32 RaggedTensor, with `target.spm`."""
        return self._vocabulary_ids(self._target, strings)

    def _vocabulary_ids(self, model, strings):
        return tf.ragged.map_flat_values(self._ids.lookup, model.tokenize(strings))

    def detokenize(self, ids):
        """int ids `[batch, length]` (dense or ragged) → `[batch]` tf.string, with `target.spm`.

        Reading stops at the first EOS; PAD and BOS are skipped; ids past the vocabulary read as
        UNK, and so does a piece `target.spm` lacks.
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        ids = tf.ragged.map_flat_values(
            lambda flat: tf.where((flat >= 0) & (flat < self.vocab_size), flat, UNK_ID), ids
        )
        before_eos = tf.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1) == 0
        ids = tf.ragged.boolean_mask(ids, before_eos & (ids != PAD_ID) & (ids != BOS_ID))
        spm_ids = tf.ragged.map_flat_values(
            lambda flat: tf.gather(self._vocabulary_to_target, flat), ids
        )
        return self._target_ids.detokenize(spm_ids)

    def _vocabulary_to_sentencepiece(self) -> list[int]:
        model = self._target_ids
        unknown = int(model.string_to_id("<unk>"))
        spm_ids = model.string_to_id(tf.constant(self.vocabulary)).numpy().tolist()
        known = model.id_to_string(tf.constant(spm_ids)).numpy()
        # `string_to_id` answers a piece it lacks with its UNK id: keep only exact matches.
        return [
            spm_id if piece.encode("utf-8") == spm_piece else unknown
            for piece, spm_id, spm_piece in zip(self.vocabulary, spm_ids, known, strict=True)
        ]

    def pieces(self, ids) -> list[str]:
        """The vocabulary pieces of a list of ids (for plots and debugging)."""
        return [self.vocabulary[i] for i in ids]

    def word_indices(self, ids) -> list[int]:
        """For each of a sentence's `ids`, the index of its word: a new one at each piece that
        starts with SentencePiece's whitespace mark "▁" (`SubwordTokenizer.word_indices`)."""
        return starts_of_words([piece.startswith("▁") for piece in self.pieces(ids)])

    def fingerprint(self) -> int:
        """A 24-bit checksum of the vocabulary and both SentencePiece models: equal for two
        tokenizers that segment and number every sentence alike (`SubwordTokenizer.fingerprint`)."""
        checksum = zlib.crc32("\n".join(self.vocabulary).encode("utf-8"))
        for asset in (self.source_asset, self.target_asset):
            checksum = zlib.crc32(Path(asset.asset_path.numpy().decode()).read_bytes(), checksum)
        return checksum & 0xFFFFFF


def _sentencepiece(path, out_type):
    # A name of its own for each model's resource: a loaded SavedModel would otherwise create
    # them all under one node name, which shares one resource, and use one model for both sides.
    return tf_text.SentencepieceTokenizer(
        model=Path(path).read_bytes(), out_type=out_type, name=f"{Path(path).stem}_{out_type.name}"
    )
