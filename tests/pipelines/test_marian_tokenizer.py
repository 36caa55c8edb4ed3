"""`MarianTokenizer` against the SentencePiece library itself: two models over one vocabulary."""

import gzip

import pytest
import sentencepiece
import tensorflow as tf

from pipelines.marian_tokenizer import MarianTokenizer, holds_marian_tokenizer
from pipelines.tokenizer import EOS_ID, PAD_ID, UNK_ID
from repo_paths import MULTI30K_DIR

SENTENCES = [
    "A man in a blue shirt is riding a bike.",
    "Two dogs play in the snow, near 3 trees!",
    "Zwei Hunde spielen im Schnee.",
    "",
]
MISSING_PIECE = "▁the"  # left out of the vocabulary: reads as UNK


def train(directory, name, language):
    with gzip.open(MULTI30K_DIR / f"train.{language}.gz", "rt", encoding="utf-8") as lines:
        text = [next(lines).strip() for _ in range(3000)]
    (directory / f"{name}.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(directory / f"{name}.txt"),
        model_prefix=str(directory / name),
        vocab_size=400,
        model_type="unigram",
        minloglevel=2,
    )
    (directory / f"{name}.model").rename(directory / f"{name}.spm")
    return sentencepiece.SentencePieceProcessor(model_file=str(directory / f"{name}.spm"))


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    directory = tmp_path_factory.mktemp("marian")
    source, target = train(directory, "source", "en"), train(directory, "target", "de")
    pieces = {
        model.id_to_piece(i): None
        for model in (source, target)
        for i in range(model.get_piece_size())
        if not model.is_control(i) and not model.is_unknown(i)
    }
    del pieces[MISSING_PIECE]
    vocabulary = ["<new-pad>", "<pad>", "</s>", "<unk>", ">>deu<<", ">>fra<<", *pieces]
    (directory / "vocabulary.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    return MarianTokenizer(directory), source, target, vocabulary


def expected_ids(model, vocabulary, text):
    return [
        vocabulary.index(piece) if piece in vocabulary else UNK_ID
        for piece in model.encode(text, out_type=str)
    ]


def test_sources_and_targets_are_segmented_by_their_own_models(marian):
    tokenizer, source, target, vocabulary = marian
    assert holds_marian_tokenizer(tokenizer.path.parent)
    strings = tf.constant(SENTENCES)
    assert tokenizer.tokenize(strings).to_list() == [
        expected_ids(source, vocabulary, s) for s in SENTENCES
    ]
    assert tokenizer.tokenize_target(strings).to_list() == [
        expected_ids(target, vocabulary, s) for s in SENTENCES
    ]
    assert UNK_ID in tokenizer.tokenize(strings).to_list()[1]  # "▁the" is not in the vocabulary


def test_a_leading_language_token_is_one_id_and_an_unknown_one_unk(marian):
    tokenizer, source, _, vocabulary = marian
    ids = tokenizer.tokenize(tf.constant([">>fra<< A dog.", ">>xyz<< A dog.", "A >>fra<< dog."]))
    dog = expected_ids(source, vocabulary, "A dog.")
    assert ids.to_list()[:2] == [[vocabulary.index(">>fra<<"), *dog], [UNK_ID, *dog]]
    assert tokenizer.target_languages == ["deu", "fra"]
    assert ids.to_list()[2] == expected_ids(source, vocabulary, "A >>fra<< dog.")


def test_detokenize_is_the_target_models_decoding_up_to_eos(marian):
    tokenizer, _, target, vocabulary = marian
    text = "Zwei Hunde spielen im Schnee."
    ids = expected_ids(target, vocabulary, text)
    batch = tf.ragged.constant([[*ids, EOS_ID, 7, 8], [*ids, PAD_ID]])
    decoded = [s.decode("utf-8") for s in tokenizer.detokenize(batch).numpy()]
    assert decoded == [target.decode(target.encode(text))] * 2


def test_pieces_words_and_fingerprint(marian):
    tokenizer, _, _, vocabulary = marian
    ids = tokenizer.tokenize(tf.constant(["Two dogs play."])).to_list()[0]
    assert tokenizer.pieces(ids) == [vocabulary[i] for i in ids]
    assert tokenizer.word_indices(ids)[-1] == 2  # "Two", "dogs", "play." (with its period)
    assert tokenizer.fingerprint() == MarianTokenizer(tokenizer.path.parent).fingerprint()


def test_a_saved_model_keeps_each_side_its_own_sentencepiece_model(marian, tmp_path):
    """Loaded from a SavedModel (as an export is), sources still go through source.spm and
    outputs through target.spm."""
    tokenizer, source, target, vocabulary = marian
    module = tf.Module()
    module.tokenizer = tokenizer
    module.tokenize = tf.function(
        lambda text: tokenizer.tokenize(text).to_tensor(PAD_ID),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    module.detokenize = tf.function(
        tokenizer.detokenize, input_signature=[tf.TensorSpec([None, None], tf.int32)]
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    text = "Two dogs play in the snow, near 3 trees!"
    assert loaded.tokenize(tf.constant([text])).numpy().tolist() == [
        expected_ids(source, vocabulary, text)
    ]
    german = "Zwei Hunde spielen im Schnee."
    ids = tf.constant([expected_ids(target, vocabulary, german) + [EOS_ID]])
    assert loaded.detokenize(ids).numpy()[0].decode("utf-8") == target.decode(target.encode(german))


def test_a_vocabulary_without_language_tokens_reads_a_leading_one_as_unk(marian, tmp_path):
    """A bilingual model's vocabulary holds no `>>lang<<` token: a source still tokenizes."""
    tokenizer, source, _, vocabulary = marian
    bilingual = [piece for piece in vocabulary if piece not in (">>deu<<", ">>fra<<")]
    for name in ("source.spm", "target.spm"):
        (tmp_path / name).write_bytes((tokenizer.path.parent / name).read_bytes())
    (tmp_path / "vocabulary.txt").write_text("\n".join(bilingual) + "\n", encoding="utf-8")
    ids = MarianTokenizer(tmp_path).tokenize(tf.constant(["A dog.", ">>fra<< A dog."]))
    dog = expected_ids(source, bilingual, "A dog.")
    assert ids.to_list() == [dog, [UNK_ID, *dog]]
