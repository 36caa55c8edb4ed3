"""The exports of an imported Marian (OPUS-MT) run: SavedModel, TFLite and CTranslate2 each
translate as the Keras model does, with the run's two SentencePiece models and shared vocabulary.

The run is a stand-in for an imported one, with the files an import writes: a random tiny model
in Marian's configuration (swish, output bias, sinusoids in halves, a zero BOS row: Marian's
`<pad>`), `vocabulary.txt` in our id order and Marian's `vocab.json` in its own.
"""

import gzip
import json
import shutil

import ctranslate2
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig, cli
from keras_transformer.decoding.search import beam_decode, greedy_decode
from keras_transformer.decoding.translator import load_run, pad_to_bucket
from keras_transformer.search_settings import SearchSettings
from keras_transformer.serving.ctranslate2_export import export_ctranslate2
from keras_transformer.serving.tflite import TOKENIZER_NOTE, tokenizer_directory
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID

pytestmark = pytest.mark.slow  # exports a SavedModel, a TFLite model and a CTranslate2 model

SENTENCES = [
    ">>deu<< A man in a blue shirt is riding a bike.",
    ">>fra<< Two dogs play in the snow.",
    ">>deu<< People.",
    ">>fra<< A girl in a red coat walks past a shop.",
]
SOURCE_LENGTH = 32  # TFLite's fixed source width; the run's max_length is 40
EXTRA_LENGTH = 6


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translator's tokenizer)."""


def train_sentencepiece(directory, name, language, multi30k_dir):
    with gzip.open(multi30k_dir / f"train.{language}.gz", "rt", encoding="utf-8") as lines:
        text = [next(lines).strip() for _ in range(2000)]
    (directory / f"{name}.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(directory / f"{name}.txt"),
        model_prefix=str(directory / name),
        vocab_size=300,
        model_type="unigram",
        num_threads=1,  # the same model each time
        minloglevel=2,
    )
    (directory / f"{name}.txt").unlink()
    (directory / f"{name}.vocab").unlink()
    (directory / f"{name}.model").rename(directory / f"{name}.spm")
    return sentencepiece.SentencePieceProcessor(model_file=str(directory / f"{name}.spm"))


@pytest.fixture(scope="module")
def marian_run(tmp_path_factory, multi30k_dir):
    """A run as the importer writes one, of a random model in Marian's configuration."""
    directory = tmp_path_factory.mktemp("imported")
    models = [
        train_sentencepiece(directory, name, language, multi30k_dir)
        for name, language in (("source", "en"), ("target", "de"))
    ]
    pieces = {
        model.id_to_piece(i): None
        for model in models
        for i in range(model.get_piece_size())
        if not model.is_control(i) and not model.is_unknown(i)
    }
    # Marian's order: </s> first, <pad> last, as in OPUS-MT's classic models.
    marian = ["</s>", "<unk>", ">>deu<<", ">>fra<<", *pieces, "<pad>"]
    (directory / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(marian)}))
    ours = ["<new-pad>", "<pad>", "</s>", "<unk>", ">>deu<<", ">>fra<<", *pieces]
    (directory / "vocabulary.txt").write_text("\n".join(ours) + "\n", encoding="utf-8")
    config = TransformerConfig.preset(
        "tiny",
        vocab_size=len(ours),
        max_length=40,
        ffn_activation="swish",
        output_bias=True,
        sinusoid_layout="halves",
        layer_norm_epsilon=1e-5,
    )
    (directory / "config.json").write_text(config.to_json())
    (directory / "run.json").write_text(json.dumps({"source_language": "en"}))
    tf.keras.utils.set_random_seed(7)
    model = Transformer(config)
    embeddings = model.target_embedding.embeddings
    embeddings.assign(
        tf.tensor_scatter_nd_update(embeddings, [[BOS_ID]], tf.zeros([1, config.d_model]))
    )
    model.target_embedding.logits_bias.assign(np.random.default_rng(0).normal(size=len(ours)))
    model.save_weights(directory / "model.weights.h5")
    return directory


@pytest.fixture(scope="module")
def translator(marian_run):
    return load_run(marian_run)


@pytest.fixture(scope="module")
def saved_model(marian_run, tmp_path_factory):
    base = tmp_path_factory.mktemp("saved_models") / "imported"
    cli.main(["export", "--model", str(marian_run), "--output", str(base)])
    return base / "1"


def test_saved_model_holds_both_sentencepiece_models_and_the_vocabulary(saved_model):
    assets = sorted(path.name for path in (saved_model / "assets").iterdir())
    assert assets == ["source.spm", "target.spm", "vocabulary.txt"]


def test_saved_model_translates_strings_as_keras_with_the_language_token(
    saved_model, translator, marian_run, tmp_path
):
    """Loaded from a copy, with the run gone from where it was: its assets are what it reads."""
    moved = tmp_path / "served"
    shutil.copytree(saved_model, moved)
    serve = tf.saved_model.load(str(moved)).signatures["serving_default"]
    served = serve(text=tf.constant(SENTENCES))
    expected = translator.translate(SENTENCES, SearchSettings())
    assert [t.decode("utf-8") for t in served["translations"].numpy()] == expected
    # The target-language token is one id, first, as Marian's tokenizer gives it.
    source_ids = translator.encode_sentences(SENTENCES)
    languages = translator.tokenizer.pieces([ids[0] for ids in source_ids])
    assert languages == [">>deu<<", ">>fra<<", ">>deu<<", ">>fra<<"]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_saved_model_ids_equal_keras_search(saved_model, translator, beam_size):
    source = pad_to_bucket(translator.encode_sentences(SENTENCES))
    served = tf.saved_model.load(str(saved_model)).signatures["translate_ids"](
        source_ids=tf.constant(source),
        beam_size=tf.constant(beam_size),
        alpha=tf.constant(0.6),
        extra_length=tf.constant(EXTRA_LENGTH),
    )
    if beam_size == 1:
        expected = greedy_decode(translator.model, source, extra_length=EXTRA_LENGTH).ids
    else:
        result = beam_decode(translator.model, source, 4, alpha=0.6, extra_length=EXTRA_LENGTH)
        expected = result.ids[:, 0]
    np.testing.assert_array_equal(served["target_ids"].numpy(), expected.numpy())


@pytest.fixture(scope="module")
def tflite_model(marian_run, tmp_path_factory):
    path = tmp_path_factory.mktemp("tflite") / "imported.tflite"
    arguments = ["--model", str(marian_run), "--format", "tflite", "--output", str(path)]
    cli.main(
        ["export", *arguments, "--source-length", str(SOURCE_LENGTH)]
        + ["--extra-length", str(EXTRA_LENGTH), "--beam", "1"]
    )
    return path


def tflite_encode(directory, text):
    """The source ids of `text` as tokenizer.json tells a TFLite caller to compute them, with
    the SentencePiece library alone."""
    note = json.loads((directory / TOKENIZER_NOTE).read_text(encoding="utf-8"))
    vocabulary = (directory / note["vocabulary"]).read_text(encoding="utf-8").split("\n")[:-1]
    source = sentencepiece.SentencePieceProcessor(model_file=str(directory / note["source_model"]))
    language, _, rest = text.partition(" ")
    pieces = [language, *source.encode(rest, out_type=str)]
    ids = [vocabulary.index(p) if p in vocabulary else note["unk_id"] for p in pieces]
    ids.append(note["eos_id"])
    return np.array([ids + [note["pad_id"]] * (note["source_length"] - len(ids))], np.int32)


def tflite_decode(directory, ids):
    note = json.loads((directory / TOKENIZER_NOTE).read_text(encoding="utf-8"))
    vocabulary = (directory / note["vocabulary"]).read_text(encoding="utf-8").split("\n")[:-1]
    target = sentencepiece.SentencePieceProcessor(model_file=str(directory / note["target_model"]))
    ids = list(ids)
    ids = ids[: ids.index(note["eos_id"])] if note["eos_id"] in ids else ids
    pieces = [vocabulary[i] for i in ids if i not in (note["pad_id"], note["bos_id"])]
    return target.decode([target.piece_to_id(piece) for piece in pieces])


def test_tflite_ships_its_tokenizer_and_translates_as_keras(tflite_model, translator):
    """Tokenized as tokenizer.json says, the TFLite model's greedy ids are Keras's, and its
    output decoded as it says is Keras's translation."""
    from ai_edge_litert.interpreter import Interpreter

    directory = tokenizer_directory(tflite_model)
    note = json.loads((directory / TOKENIZER_NOTE).read_text(encoding="utf-8"))
    assert note["target_languages"] == ["deu", "fra"]
    assert sorted(p.name for p in directory.iterdir()) == [
        "source.spm",
        "target.spm",
        TOKENIZER_NOTE,
        "vocabulary.txt",
    ]
    runner = Interpreter(model_path=str(tflite_model)).get_signature_runner("translate")
    greedy = SearchSettings(beam_size=1, extra_length=EXTRA_LENGTH)
    for sentence in SENTENCES:
        source = tflite_encode(directory, sentence)
        ours = translator.encode_sentences([sentence])[0]
        assert source[0].tolist() == ours + [PAD_ID] * (SOURCE_LENGTH - len(ours))
        target = runner(source_ids=source)["target_ids"][0]
        expected = greedy_decode(translator.model, source, extra_length=EXTRA_LENGTH).ids
        np.testing.assert_array_equal(target, expected.numpy()[0])
        assert tflite_decode(directory, target) == translator.translate([sentence], greedy)[0]


@pytest.fixture(scope="module")
def ctranslate2_model(marian_run, tmp_path_factory):
    output = tmp_path_factory.mktemp("ctranslate2") / "imported"
    arguments = ["--model", str(marian_run), "--output", str(output)]
    cli.main(["export", "--format", "ctranslate2", *arguments])
    return output


def test_ctranslate2_export_is_marians_vocabulary_and_files(ctranslate2_model, marian_run):
    """As CTranslate2's own converter writes an OPUS-MT model: Marian's order without <pad>,
    both SentencePiece models beside."""
    marian = json.loads((marian_run / "vocab.json").read_text())
    vocabulary = json.loads((ctranslate2_model / "shared_vocabulary.json").read_text())
    assert vocabulary == sorted(marian, key=marian.get)[:-1]
    config = json.loads((ctranslate2_model / "config.json").read_text())
    special = [config[name] for name in ("decoder_start_token", "eos_token", "unk_token")]
    assert special == ["</s>", "</s>", "<unk>"] and not config["add_source_eos"]
    for name in ("source.spm", "target.spm"):
        assert (ctranslate2_model / name).read_bytes() == (marian_run / name).read_bytes()


def assert_ctranslate2_greedy_equals_keras(ctranslate2_model, translator):
    """One sentence a call, for our limit of its length (</s> included) + extra."""
    engine = ctranslate2.Translator(str(ctranslate2_model), device="cpu", intra_threads=1)
    tokenizer = translator.tokenizer
    ids = {piece: i for i, piece in enumerate(tokenizer.vocabulary)}
    source_ids = translator.encode_sentences(SENTENCES)
    expected = greedy_decode(
        translator.model, pad_to_bucket(source_ids), extra_length=EXTRA_LENGTH
    ).ids.numpy()
    translations = []
    for source, row in zip(source_ids, expected, strict=True):
        (result,) = engine.translate_batch(
            [tokenizer.pieces(source)],  # </s> included, as Marian's tokenizer gives it
            beam_size=1,
            max_decoding_length=len(source) + EXTRA_LENGTH,
            min_decoding_length=0,
            return_end_token=True,
        )
        ours = [i for i in row.tolist() if i != PAD_ID]
        ours = ours[: ours.index(EOS_ID) + 1] if EOS_ID in ours else ours
        assert [ids[piece] for piece in result.hypotheses[0]] == ours
        translations.append(ours)
    return translations


def test_ctranslate2_greedy_ids_equal_keras(ctranslate2_model, translator):
    translations = assert_ctranslate2_greedy_equals_keras(ctranslate2_model, translator)
    assert_not_trivial(translations)


def assert_not_trivial(translations):
    """A random model's translations: not one for every sentence."""
    assert len({tuple(ids) for ids in translations}) > 1, translations


def test_a_start_row_no_longer_zero_is_kept_as_the_decoders_start(marian_run, tmp_path):
    """Fine-tuning trains the BOS row (Marian's <pad>), which then no longer starts from zero:
    the export keeps it, as CTranslate2's start token, never generated."""
    tuned = tmp_path / "tuned"
    shutil.copytree(marian_run, tuned)
    translator = load_run(tuned)
    embeddings = translator.model.target_embedding.embeddings
    start = np.random.default_rng(1).normal(size=[1, translator.model.config.d_model])
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[BOS_ID]], start))
    translator.model.save_weights(tuned / "model.weights.h5")
    translator = load_run(tuned)
    output = export_ctranslate2(translator, tmp_path / "ct2")
    marian = json.loads((marian_run / "vocab.json").read_text())
    vocabulary = json.loads((output / "shared_vocabulary.json").read_text())
    assert vocabulary == sorted(marian, key=marian.get)
    config = json.loads((output / "config.json").read_text())
    assert config["decoder_start_token"] == "<pad>"
    assert_not_trivial(assert_ctranslate2_greedy_equals_keras(output, translator))


def test_a_run_without_marians_vocabulary_is_refused_by_name(marian_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(marian_run, run)
    (run / "vocab.json").unlink()
    arguments = ["--model", str(run), "--output", str(tmp_path / "ct2")]
    with pytest.raises(SystemExit, match="vocab.json not found"):
        cli.main(["export", "--format", "ctranslate2", *arguments])
    assert not list(tmp_path.glob("*ct2*")), "a refused export leaves nothing behind"
