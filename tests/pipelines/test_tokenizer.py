"""Shared subword vocabularies tokenized in the graph (§5.1)."""

import unicodedata

import pytest
import tensorflow as tf

from pipelines import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    SubwordTokenizer,
    check_sentencepiece_model,
    train_sentencepiece,
    train_wordpiece,
)
from pipelines.corpus import read_lines
from pipelines.tokenizer import load_or_train_tokenizer


def test_sentencepiece_round_trip_on_real_sentences(tokenizer, multi30k_dir):
    lines = (
        read_lines(multi30k_dir / "val.en.gz")[:200] + read_lines(multi30k_dir / "val.de.gz")[:200]
    )
    ids = tokenizer.tokenize(tf.constant(lines))
    assert ids.dtype == tf.int32 and ids.shape[0] == 400
    restored = [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
    # SentencePiece normalizes to NFKC (a no-break space becomes a space, for one): lines that
    # NFKC leaves alone come back exactly, the others in their NFKC form.
    assert restored == [unicodedata.normalize("NFKC", line) for line in lines]
    unchanged = [line for line in lines if unicodedata.normalize("NFKC", line) == line]
    assert len(unchanged) >= 395
    assert all(r == line for r, line in zip(restored, lines, strict=True) if line in unchanged)


def test_reserved_ids_are_fixed(tokenizer):
    model = tokenizer._tokenizer
    pieces = model.id_to_string(tf.constant([PAD_ID, BOS_ID, EOS_ID, UNK_ID])).numpy().tolist()
    assert pieces == [b"<pad>", b"<s>", b"</s>", b"<unk>"]
    ids = tokenizer.tokenize(tf.constant(["A dog."])).to_list()[0]
    assert min(ids) > UNK_ID


def test_detokenize_stops_at_eos_and_skips_padding(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["A dog runs."])).to_list()[0]
    padded = tf.constant([[BOS_ID, *ids, EOS_ID, 57, 58, PAD_ID]])
    assert tokenizer.detokenize(padded).numpy()[0] == b"A dog runs."


def test_tokenizer_works_inside_a_tf_function(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        return tokenizer.detokenize(tokenizer.tokenize(strings))

    assert round_trip(tf.constant(["Two men talk."])).numpy()[0] == b"Two men talk."


@pytest.mark.slow
def test_wordpiece_vocabulary_and_round_trip(tmp_path, train_slice, multi30k_dir):
    path = train_wordpiece(train_slice, tmp_path / "subwords.vocab.txt", vocab_size=1500)
    assert path.read_text().splitlines()[:4] == ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
    wordpiece = SubwordTokenizer(path)
    lines = read_lines(multi30k_dir / "val.en.gz")[:100]
    ids = wordpiece.tokenize(tf.constant(lines))
    restored = [s.decode() for s in wordpiece.detokenize(ids).numpy()]
    # WordPiece keeps every character but not the spacing around punctuation.
    assert ["".join(r.split()) for r in restored] == ["".join(s.split()) for s in lines]
    assert wordpiece.vocab_size <= 1500 + 4


def test_word_model_gives_one_id_per_word_even_to_a_run_of_unknown_words(tmp_path, train_slice):
    # SentencePiece alone turns the three unknown words below into a single <unk>.
    path = train_sentencepiece(train_slice, tmp_path / "words.model", 1000, model_type="word")
    words = SubwordTokenizer(path)
    a, dog, runs = words.tokenize(tf.constant(["A dog runs"])).to_list()[0]
    assert min(a, dog, runs) > UNK_ID
    sentences = ["A dog Xyzzy Plugh Quux runs", "Xyzzy  Plugh", ""]
    expected = [[a, dog, UNK_ID, UNK_ID, UNK_ID, runs], [UNK_ID, UNK_ID], []]
    assert words.tokenize(tf.constant(sentences)).to_list() == expected
    in_graph = tf.function(words.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    assert in_graph(tf.constant(sentences)).to_list() == expected
    assert words.tokenize(tf.constant(sentences[0])).numpy().tolist() == expected[0]


def test_lowercase_model_case_folds_in_the_graph_and_a_rerun_must_agree(tmp_path, train_slice):
    path = tmp_path / "subwords.model"
    lowercased = load_or_train_tokenizer(path, train_slice, 1000, lowercase=True)
    assert lowercased.lowercase
    mixed, lower = ["Two Men Talk. ÜBER"], ["two men talk. über"]
    in_graph = tf.function(lowercased.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    assert in_graph(tf.constant(mixed)).to_list() == lowercased.tokenize(lower).to_list()
    assert lowercased.detokenize(lowercased.tokenize(mixed)).numpy()[0].decode() == lower[0]
    # The vocabulary holds no upper-case piece at all.
    pieces = lowercased.pieces(range(4, lowercased.vocab_size))
    assert all(piece == piece.lower() for piece in pieces)
    with pytest.raises(ValueError, match="lowercasing vocabulary, but lowercase=False"):
        load_or_train_tokenizer(path, train_slice, 1000)


def test_fingerprint_tells_vocabularies_apart_by_their_pieces(tokenizer, tmp_path, train_slice):
    """What multi-worker training compares: the same files, trained again elsewhere, give the
    same pieces and checksum; another vocabulary size or other text does not."""
    again = SubwordTokenizer(train_sentencepiece(train_slice, tmp_path / "a" / "s.model", 2000))
    assert again.fingerprint() == tokenizer.fingerprint()
    assert 0 <= tokenizer.fingerprint() < 2**24
    smaller = SubwordTokenizer(train_sentencepiece(train_slice, tmp_path / "b.model", 1999))
    german = SubwordTokenizer(train_sentencepiece(train_slice[1:], tmp_path / "c.model", 2000))
    assert len({tokenizer.fingerprint(), smaller.fingerprint(), german.fingerprint()}) == 3


def test_cased_model_keeps_case(tokenizer):
    assert not tokenizer.lowercase
    assert tokenizer.detokenize(tokenizer.tokenize(["Two Men"])).numpy()[0] == b"Two Men"


@pytest.mark.parametrize("name, kind", [("subwords.model", "wordpiece"), ("v.vocab.txt", "bpe")])
def test_a_vocabulary_file_named_for_the_other_format_is_refused(tmp_path, name, kind):
    with pytest.raises(ValueError, match=r"vocabulary file must (not )?end in \.vocab\.txt"):
        load_or_train_tokenizer(tmp_path / name, [], 100, kind=kind)
    assert not list(tmp_path.iterdir())


def test_subword_dropout_samples_segmentations_of_the_same_text(tokenizer, multi30k_dir):
    lines = read_lines(multi30k_dir / "val.de.gz")[:200]
    sampled = SubwordTokenizer(tokenizer.path, dropout=0.1)
    # Two passes of a tf.data pipeline, as training reads its pairs: each segments anew.
    dataset = tf.data.Dataset.from_tensor_slices(lines).batch(50).map(sampled.tokenize)
    first, second = ([ids for batch in dataset for ids in batch.to_list()] for _ in range(2))
    deterministic = tokenizer.tokenize(tf.constant(lines)).to_list()
    assert sum(a != b for a, b in zip(first, second, strict=True)) > 100
    # Skipped merges leave more, shorter pieces; the text they spell is the same.
    assert sum(map(len, first)) > 1.1 * sum(map(len, deterministic))
    spelled = tokenizer.detokenize(tf.ragged.constant(first)).numpy().tolist()
    assert spelled == tokenizer.detokenize(tf.ragged.constant(deterministic)).numpy().tolist()


def test_subword_dropout_is_refused_for_models_without_merges(tmp_path, train_slice):
    words = train_sentencepiece(train_slice, tmp_path / "words.model", 1000, model_type="word")
    with pytest.raises(ValueError, match="words.model: subword dropout needs a BPE model"):
        SubwordTokenizer(words, dropout=0.1)
    wordpiece = tmp_path / "w.vocab.txt"
    wordpiece.write_text("[PAD]\n[BOS]\n[EOS]\n[UNK]\ndog\n")
    with pytest.raises(ValueError, match="needs a BPE model, not WordPiece"):
        SubwordTokenizer(wordpiece, dropout=0.1)
    with pytest.raises(ValueError, match="subword dropout 1.0 must be in"):
        SubwordTokenizer(words, dropout=1.0)


def test_a_sentencepiece_model_is_checked_for_type_case_folding_and_special_ids(
    subword_model, tmp_path
):
    from sentencepiece import sentencepiece_model_pb2

    check_sentencepiece_model(subword_model)  # BPE, cased, this project's ids: as trained
    with pytest.raises(ValueError, match="is a bpe model, where this dataset needs word"):
        check_sentencepiece_model(subword_model, kind="word")
    with pytest.raises(ValueError, match="is not a lowercasing model, as lowercase=True asks"):
        check_sentencepiece_model(subword_model, lowercase=True)
    # SentencePiece's own defaults (UNK 0, BOS 1, EOS 2, no PAD) would mask the wrong id.
    proto = sentencepiece_model_pb2.ModelProto.FromString(subword_model.read_bytes())
    proto.trainer_spec.unk_id, proto.trainer_spec.pad_id = 0, -1
    elsewhere = tmp_path / "elsewhere.model"
    elsewhere.write_bytes(proto.SerializeToString())
    with pytest.raises(ValueError, match=r"has the special ids \{'pad': -1, 'bos'"):
        check_sentencepiece_model(elsewhere)
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"\x00not a model")
    with pytest.raises(ValueError, match="garbage.model is not a SentencePiece model"):
        check_sentencepiece_model(garbage)
