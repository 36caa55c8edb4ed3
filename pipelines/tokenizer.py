"""Shared subword vocabularies (§5.1), tokenized inside the TensorFlow graph with tensorflow-text.

"Sentences were encoded using byte-pair encoding, which has a shared source-target vocabulary of
about 37000 tokens" (EN-DE); EN-FR used "a 32000 word-piece vocabulary". Both are here:

- BPE: a SentencePiece model with `model_type=bpe`, run by `tensorflow_text.SentencepieceTokenizer`
  (not `FastSentencepieceTokenizer`, which does not reproduce a BPE model's pieces).
- WordPiece: a vocabulary learned with tensorflow-text's `bert_vocab_from_dataset`, run by
  `tensorflow_text.FastWordpieceTokenizer`. Its detokenizer joins words with single spaces, so
  it does not restore the spacing around punctuation ("dog ." for "dog.").

A BPE model can also segment each sentence at random (`SubwordTokenizer(path, dropout=p)`):
BPE-dropout (Provilkov et al., 2020) skips each merge with probability p, so the same sentence
comes out in different pieces each time it is read. Training reads its pairs that way when
`subword_dropout` is set; everything else uses the model's one deterministic segmentation.

A SentencePiece model can also case-fold (`lowercase=True`): its normalizer lowercases every
input inside the model, so training, serving and the exported SavedModel all see the same
lowercased text, like the lowercased, tokenized corpora that many published Multi30k results
train on.

Reserved ids, the same in both: PAD = 0, BOS = 1, EOS = 2, UNK = 3. The model file (`*.model`
for SentencePiece, `*.vocab.txt` for WordPiece) is all a tokenizer needs, so it travels as an
asset of the exported SavedModel.
"""

import logging
import tempfile
import zlib
from pathlib import Path

import tensorflow as tf
import tensorflow_text as tf_text

from durable_files import write_atomically
from pipelines.corpus import CorpusError, read_lines

logger = logging.getLogger(__name__)

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
WORDPIECE_SUFFIX = ".vocab.txt"  # how `SubwordTokenizer` tells a WordPiece file
WORDPIECE_RESERVED = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]


class SubwordTokenizer(tf.Module):
    """Strings ⇄ subword ids in the graph, from a SentencePiece model or a WordPiece vocabulary.

    Args:
        path: `*.model` (SentencePiece) or `*.vocab.txt` (WordPiece).
        dropout: BPE-dropout's probability of skipping a merge (a SentencePiece BPE model only);
            0 segments deterministically.

    Attributes:
        lowercase: whether the model case-folds its input (`train_sentencepiece(lowercase=True)`).

    Create it after seeding (`keras.utils.set_random_seed`, `tf.random.set_seed`): seeding
    clears TensorFlow's eager kernel caches, which deletes the SentencePiece op's resource.

    Example (needs a trained subword model, so not run as a doctest)::

        tokenizer = SubwordTokenizer("runs/m30k-ende/subwords.model")
        ids = tokenizer.tokenize(tf.constant(["A dog runs."]))  # RaggedTensor [batch, (tokens)]
        tokenizer.detokenize(ids)  # [b"A dog runs."]
    """

    def __init__(self, path, dropout=0.0):
        super().__init__(name="subword_tokenizer")
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"subword model not found: {self.path}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"subword dropout {dropout} must be in [0, 1)")
        self.asset = tf.saved_model.Asset(str(self.path))
        if self.path.name.endswith(WORDPIECE_SUFFIX):
            vocabulary = self.path.read_text(encoding="utf-8").splitlines()
            if vocabulary[:4] != WORDPIECE_RESERVED:
                raise ValueError(f"{self.path}: the first entries must be {WORDPIECE_RESERVED}")
            self.kind = "wordpiece"
            if dropout:
                raise ValueError(f"{self.path}: subword dropout needs a BPE model, not WordPiece")
            self._vocabulary = tf.constant(vocabulary)
            self._tokenizer = tf_text.FastWordpieceTokenizer(
                vocab=vocabulary, unknown_token="[UNK]", support_detokenization=True
            )
            self.vocab_size = len(vocabulary)
            self.one_id_per_word = False
            self.lowercase = False
        else:
            self.kind = "sentencepiece"
            model = self.path.read_bytes()
            spec = _model_proto(model)
            if dropout and spec.trainer_spec.model_type != spec.trainer_spec.BPE:
                raise ValueError(f"{self.path}: subword dropout needs a BPE model")
            # For a BPE model SentencePiece reads alpha as the merge-dropout probability, and
            # samples only when nbest_size is not 0 or 1.
            self._tokenizer = tf_text.SentencepieceTokenizer(
                model=model, out_type=tf.int32, nbest_size=-1 if dropout else 0, alpha=dropout
            )
            self.vocab_size = int(self._tokenizer.vocab_size())
            self.one_id_per_word = spec.trainer_spec.model_type == spec.trainer_spec.WORD
            self.lowercase = spec.normalizer_spec.name == CASE_FOLDING_RULE

    def tokenize(self, strings):
        """`[batch]` tf.string → int32 RaggedTensor `[batch, (tokens)]`, no BOS/EOS.

        A word model gives one id per whitespace-separated word, an unknown one included.
        """
        if self.one_id_per_word:
            # SentencePiece merges a run of unknown words into one <unk> ("Pierre Vinken" →
            # one id), which would lose the parser its word count; word by word, it cannot.
            words = tf.strings.split(strings)
            return self._tokenizer.tokenize(words).merge_dims(-2, -1)
        return tf.cast(self._tokenizer.tokenize(strings), tf.int32)

    def tokenize_target(self, strings):
        """Target sentences, tokenized as sources are: one subword model serves both sides."""
        return self.tokenize(strings)

    def pieces(self, ids) -> list[str]:
        """The subword strings of a list of ids (for plots and debugging)."""
        ids = tf.constant(list(ids), tf.int32)
        if self.kind == "wordpiece":
            strings = tf.gather(self._vocabulary, ids)
        else:
            strings = self._tokenizer.id_to_string(ids)
        return [s.decode("utf-8") for s in strings.numpy()]

    def word_indices(self, ids) -> list[int]:
        """For each of a sentence's `ids`, the index of the word it belongs to, as the subword
        model marks words: a new one at each SentencePiece piece that starts with "▁" (its
        whitespace mark), at each WordPiece piece but a "##" continuation, at every id of a word
        model. For ordinary text, SentencePiece's words are the line's whitespace-separated
        ones."""
        pieces = self.pieces(ids)
        if self.one_id_per_word:
            return starts_of_words([True] * len(pieces))
        if self.kind == "wordpiece":
            return starts_of_words([not piece.startswith("##") for piece in pieces])
        return starts_of_words([piece.startswith("▁") for piece in pieces])

    def fingerprint(self) -> int:
        """A 24-bit checksum of the pieces in id order: equal for two vocabularies that give every
        id the same piece, whichever files, paths or process trained them. 24 bits, so that
        `training.check_workers_agree` squares it exactly in float64."""
        pieces = "\n".join(self.pieces(range(self.vocab_size)))
        return zlib.crc32(pieces.encode("utf-8")) & 0xFFFFFF

    def detokenize(self, ids):
        """int ids `[batch, length]` (dense or ragged) → `[batch]` tf.string.

        Reading stops at the first EOS; PAD and BOS are skipped; ids past the vocabulary read as
        UNK.
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        # A model may have more ids than its vocabulary (a WordPiece learner can learn fewer
        # entries than asked): those read as UNK, where WordPiece would read past its table.
        ids = tf.ragged.map_flat_values(
            lambda flat: tf.where(flat < self.vocab_size, flat, UNK_ID), ids
        )
        before_eos = tf.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1) == 0
        ids = tf.ragged.boolean_mask(ids, before_eos & (ids != PAD_ID) & (ids != BOS_ID))
        words = self._tokenizer.detokenize(ids)
        return words if words.shape.rank == 1 else tf.strings.reduce_join(words, -1, separator=" ")


def starts_of_words(starts: list[bool]) -> list[int]:
    """The word index of each piece, given whether each piece starts a word (the first piece
    always does)."""
    indices, word = [], -1
    for position, start in enumerate(starts):
        word += start or position == 0
        indices.append(word)
    return indices


# SentencePiece's normalization rules: NFKC (its default), and NFKC followed by case folding.
DEFAULT_RULE, CASE_FOLDING_RULE = "nmt_nfkc", "nmt_nfkc_cf"


def _model_proto(model: bytes):
    """A serialized SentencePiece model's settings (its type, its normalization rule)."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    return proto


def check_sentencepiece_model(path, kind="bpe", lowercase=False):
    """Raises ValueError naming `path` unless it is a SentencePiece model as
    `train_sentencepiece(model_type=kind, lowercase=lowercase)` writes one: its type, its case
    folding, and the special ids (PAD 0, BOS, EOS, UNK) that the pipelines and masks assume. For
    a model made elsewhere (`train --subwords`), which would otherwise train silently wrong."""
    from google.protobuf.message import DecodeError

    path = Path(path)
    try:
        spec = _model_proto(path.read_bytes())
    except DecodeError:
        spec = None
    if spec is None or not spec.pieces:
        raise ValueError(f"{path} is not a SentencePiece model")
    model_type = spec.trainer_spec.ModelType.Name(spec.trainer_spec.model_type).lower()
    if model_type != kind:
        raise ValueError(f"{path} is a {model_type} model, where this dataset needs {kind}")
    if (spec.normalizer_spec.name == CASE_FOLDING_RULE) != lowercase:
        folding = "lowercasing" if lowercase else "cased"
        raise ValueError(f"{path} is not a {folding} model, as lowercase={lowercase} asks")
    special = {
        name: getattr(spec.trainer_spec, f"{name}_id") for name in ("pad", "bos", "eos", "unk")
    }
    expected = {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID}
    if special != expected:
        raise ValueError(
            f"{path} has the special ids {special}, where the pipelines use {expected}"
        )


def _training_text(files) -> list[str]:
    lines = [line for path in files for line in read_lines(path) if line]
    if not lines:  # else SentencePiece fails with a trace of its own
        raise CorpusError(f"no text to learn a vocabulary from: {', '.join(map(str, files))}")
    return lines


def train_sentencepiece(files, model_path, vocab_size, model_type="bpe", lowercase=False) -> Path:
    """Trains a shared SentencePiece model on all lines of `files` (both languages).

    `lowercase=True` makes the model case-fold its input (rule `nmt_nfkc_cf`) before it
    learns or applies its pieces.

    `model_type="word"` keeps the `vocab_size` commonest whitespace-separated words whole and
    maps the rest to UNK: the vocabulary of Vinyals & Kaiser et al. (2015) for parsing, whose
    output symbols ("(NP", ")", "XX") are words, and whose decoder must find the n-th input
    word for its n-th "XX": one token per word keeps that alignment one to one.
    """
    import sentencepiece

    model_path = Path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        text = Path(scratch) / "train.txt"
        text.write_text("\n".join(_training_text(files)) + "\n", encoding="utf-8")
        sentencepiece.SentencePieceTrainer.train(
            input=str(text),
            model_prefix=str(Path(scratch) / "subwords"),
            vocab_size=vocab_size,
            model_type=model_type,
            normalization_rule_name=CASE_FOLDING_RULE if lowercase else DEFAULT_RULE,
            character_coverage=1.0,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            num_threads=2,
            minloglevel=2,
        )
        trained = (Path(scratch) / "subwords.model").read_bytes()
        write_atomically(model_path, lambda partial: partial.write_bytes(trained))
    return model_path


def train_wordpiece(files, vocab_path, vocab_size) -> Path:
    """Learns a shared WordPiece vocabulary with tensorflow-text's BERT vocabulary learner."""
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as learner

    lines = tf.data.Dataset.from_tensor_slices(_training_text(files)).batch(1000)
    vocabulary = learner.bert_vocab_from_dataset(
        lines,
        vocab_size=vocab_size,
        reserved_tokens=WORDPIECE_RESERVED,
        bert_tokenizer_params={"lower_case": False},
    )
    vocab_path = Path(vocab_path)
    vocab_path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(vocabulary) + "\n"
    write_atomically(vocab_path, lambda partial: partial.write_text(text, encoding="utf-8"))
    return vocab_path


def load_or_train_tokenizer(
    path, files, vocab_size, kind="bpe", lowercase=False
) -> SubwordTokenizer:
    """The tokenizer at `path`, trained on `files` first if the file does not exist yet.

    `kind`: "bpe" or "word" (SentencePiece's `model_type`, see `train_sentencepiece`), or
    "wordpiece" (`train_wordpiece`). `lowercase`: a case-folding SentencePiece model; an
    existing file must agree.
    """
    path = Path(path)
    if lowercase and kind == "wordpiece":
        raise ValueError("lowercase needs a SentencePiece vocabulary (bpe or word), not wordpiece")
    if (kind == "wordpiece") != path.name.endswith(WORDPIECE_SUFFIX):
        # `SubwordTokenizer` reads the file by its name: a vocabulary in the other format would
        # be misread.
        raise ValueError(
            f"{path}: a {kind} vocabulary file must "
            f"{'' if kind == 'wordpiece' else 'not '}end in {WORDPIECE_SUFFIX}"
        )
    if not path.exists():
        logger.info("training a %s vocabulary of %d on %s", kind, vocab_size, list(map(str, files)))
        if kind == "wordpiece":
            train_wordpiece(files, path, vocab_size)
        else:
            train_sentencepiece(files, path, vocab_size, kind, lowercase)
    tokenizer = SubwordTokenizer(path)
    if tokenizer.lowercase != lowercase:
        raise ValueError(
            f"{path} is a {'lowercasing' if tokenizer.lowercase else 'cased'} vocabulary, but "
            f"lowercase={lowercase} was asked for: resume with the setting the run began with"
        )
    return tokenizer
