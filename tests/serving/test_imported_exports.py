"""The exports of imported OPUS-MT checkpoints (tests/fixtures/marian, imported once a session by
conftest's `imported_run`) against independent references, as for a trained model:

- CTranslate2: our `export --format ctranslate2` decodes as CTranslate2's own converter's model
  of the same checkpoint (reference.json's `ctranslate2_greedy_ids`, called as its generator
  called it), with that converter's vocabulary, special tokens and both SentencePiece models;
- SavedModel: strings in, strings out, with its three assets; its greedy ids are transformers'
  `generate()`'s (`greedy_ids`) and its texts theirs decoded, a multilingual model's `>>lang<<`
  read at the start of the text; beam search as Keras's;
- TFLite: fed ids made as its tokenizer.json says, its greedy ids are the SavedModel's (and so
  transformers'); with float16 weights, the same ids as with float32.

Ids are compared in our numbering (`imported_runs.to_our_ids`), CTranslate2's in Marian's.
"""

import json
import shutil

import ctranslate2
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from imported_runs import CHECKPOINTS, FIXTURES, reference, to_our_ids
from keras_transformer import cli
from keras_transformer.decoding.search import beam_decode, greedy_decode
from keras_transformer.decoding.translator import load_run, pad_to_bucket
from keras_transformer.export.ctranslate2_export import export_ctranslate2
from keras_transformer.export.layout import (
    MODEL_INFO,
    TFLITE_TOKENIZER_NOTE,
    tflite_tokenizer_directory,
)
from keras_transformer.search_settings import SearchSettings
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID

pytestmark = pytest.mark.slow  # exports a SavedModel, two TFLite models and CTranslate2 models

MULTILINGUAL = "tc-big"  # `>>deu<<` / `>>fra<<`, EOS not 0
SOURCE_LENGTH = 48  # TFLite's fixed source width: the longest reference source fits
LIMIT = reference(MULTILINGUAL)["max_new_tokens"]  # transformers' length limit


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translator's tokenizer)."""


def until_eos(ids):
    ids = [i for i in ids if i != PAD_ID]
    return ids[: ids.index(EOS_ID) + 1] if EOS_ID in ids else ids


def transformers_greedy(name):
    """`generate()`'s greedy ids, in ours."""
    return [to_our_ids(name, ids).tolist() for ids in reference(name)["greedy_ids"]]


def our_sources(name):
    return [to_our_ids(name, ids).tolist() for ids in reference(name)["source_ids"]]


@pytest.fixture(scope="module")
def run(imported_run):
    return imported_run(MULTILINGUAL)


@pytest.fixture(scope="module")
def translator(run):
    return load_run(run)


@pytest.fixture(scope="module")
def saved_model(run, tmp_path_factory):
    """Its default search reaches transformers' `max_new_tokens`, and so may requests."""
    base = tmp_path_factory.mktemp("saved_models") / "imported"
    extra = ["--extra-length", str(LIMIT)]
    cli.main(["export", "--model", str(run), "--output", str(base), *extra])
    return base / "1"


def translate_ids(saved_model, source_ids, beam_size, extra_length):
    serve = tf.saved_model.load(str(saved_model)).signatures["translate_ids"]
    served = serve(
        source_ids=tf.constant(pad_to_bucket(source_ids)),
        beam_size=tf.constant(beam_size),
        alpha=tf.constant(0.6),
        extra_length=tf.constant(extra_length),
    )
    return served["target_ids"].numpy()


def test_saved_model_holds_both_sentencepiece_models_and_the_vocabulary(saved_model):
    assets = sorted(path.name for path in (saved_model / "assets").iterdir())
    assert assets == ["source.spm", "target.spm", "vocabulary.txt"]


def test_saved_model_records_the_language_tokens_as_written(saved_model):
    info = json.loads((saved_model / MODEL_INFO).read_text(encoding="utf-8"))
    assert (info["source_language"], info["target_language"]) == ("en", "de+fr")
    assert info["target_language_tokens"] == {"deu": ">>deu<<", "fra": ">>fra<<"}


def test_saved_model_greedy_ids_and_texts_are_transformers(saved_model, translator, tmp_path):
    """Loaded from a copy: its assets are what it reads. transformers' limit is
    `max_new_tokens` new tokens; ours, the source's length + extra, is longer."""
    served = translate_ids(saved_model, our_sources(MULTILINGUAL), 1, LIMIT)
    expected = transformers_greedy(MULTILINGUAL)
    assert [until_eos(row)[:LIMIT] for row in served.tolist()] == expected
    moved = tmp_path / "served"
    shutil.copytree(saved_model, moved)
    serve = tf.saved_model.load(str(moved)).signatures["translate_options"]
    texts = serve(
        text=tf.constant(reference(MULTILINGUAL)["sources"]),
        beam_size=tf.constant(1),
        alpha=tf.constant(0.6),
        extra_length=tf.constant(LIMIT),
    )["translations"].numpy()
    # Where transformers' translation ended within its limit, ours ended there too.
    ended = [i for i, ids in enumerate(expected) if ids[-1] == EOS_ID]
    decoded = translator.tokenizer.detokenize(tf.ragged.constant(expected)).numpy()
    assert [texts[i] for i in ended] == [decoded[i] for i in ended] and all(decoded)
    assert len(ended) > len(expected) // 2


def test_saved_model_text_and_beam_search_equal_keras(saved_model, translator):
    """`serving_default` searches as the run's translator does by default: as the checkpoint's
    generation config says (4 beams, α 1, |Y|^α), the penalty's form in every signature."""
    sources = reference(MULTILINGUAL)["sources"]
    serve = tf.saved_model.load(str(saved_model)).signatures["serving_default"]
    served = [t.decode("utf-8") for t in serve(text=tf.constant(sources))["translations"].numpy()]
    search = translator.search.replace(extra_length=LIMIT)
    assert search == SearchSettings(beam_size=4, alpha=1.0, penalty="length", extra_length=LIMIT)
    assert served == translator.translate(sources, search)
    source = pad_to_bucket(our_sources(MULTILINGUAL))
    result = beam_decode(translator.model, source, 4, alpha=0.6, extra_length=10, penalty="length")
    np.testing.assert_array_equal(
        translate_ids(saved_model, our_sources(MULTILINGUAL), 4, 10), result.ids[:, 0].numpy()
    )


@pytest.fixture(scope="module")
def tflite_models(run, tmp_path_factory):
    """The greedy TFLite model with float32 and with float16 weights."""
    directory = tmp_path_factory.mktemp("tflite")
    models = {}
    for quantize in (None, "float16"):
        path = directory / f"imported-{quantize or 'float32'}.tflite"
        arguments = ["--model", str(run), "--format", "tflite", "--output", str(path)]
        arguments += [
            "--source-length",
            str(SOURCE_LENGTH),
            "--extra-length",
            str(LIMIT),
            "--beam",
            "1",
        ]
        cli.main(["export", *arguments, *(["--quantize", quantize] if quantize else [])])
        models[quantize or "float32"] = path
    return models


def tflite_greedy(path, sources):
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path)).get_signature_runner("translate")
    return [until_eos(runner(source_ids=source)["target_ids"][0].tolist()) for source in sources]


def tflite_sources(directory, texts):
    """Source ids as tokenizer.json tells a TFLite caller to make them, with the SentencePiece
    library and the vocabulary file alone."""
    note = json.loads((directory / TFLITE_TOKENIZER_NOTE).read_text(encoding="utf-8"))
    vocabulary = (directory / note["vocabulary"]).read_text(encoding="utf-8").split("\n")[:-1]
    ids = {piece: i for i, piece in enumerate(vocabulary)}
    model = sentencepiece.SentencePieceProcessor(model_file=str(directory / note["source_model"]))
    sources = []
    for text in texts:
        language, _, rest = text.partition(" ")
        pieces = [language, *model.encode(rest, out_type=str)]
        row = [ids.get(piece, note["unk_id"]) for piece in pieces] + [note["eos_id"]]
        sources.append(np.array([row + [note["pad_id"]] * (SOURCE_LENGTH - len(row))], np.int32))
    return sources


def test_tflite_greedy_ids_are_the_saved_models(tflite_models, saved_model):
    directory = tflite_tokenizer_directory(tflite_models["float32"])
    note = json.loads((directory / TFLITE_TOKENIZER_NOTE).read_text(encoding="utf-8"))
    assert note["target_languages"] == ["deu", "fra"]
    sources = tflite_sources(directory, reference(MULTILINGUAL)["sources"])
    assert [until_eos(s[0].tolist()) for s in sources] == our_sources(MULTILINGUAL)
    served = translate_ids(saved_model, our_sources(MULTILINGUAL), 1, LIMIT)
    assert tflite_greedy(tflite_models["float32"], sources) == [
        until_eos(r) for r in served.tolist()
    ]


def test_tflite_float16_weights_give_float32s_ids(tflite_models):
    float32, float16 = tflite_models["float32"], tflite_models["float16"]
    assert float16.stat().st_size < 0.6 * float32.stat().st_size
    sources = [
        np.array([s + [PAD_ID] * (SOURCE_LENGTH - len(s))], np.int32)
        for s in our_sources(MULTILINGUAL)
    ]
    assert tflite_greedy(float16, sources) == tflite_greedy(float32, sources)


def ctranslate2_greedy(model_directory, name):
    """CTranslate2's greedy ids in Marian's numbering, called as the fixtures' generator called
    CTranslate2's own conversion: the sources as pieces with their `</s>`, one batch."""
    marian = json.loads((FIXTURES / name / "vocab.json").read_text(encoding="utf-8"))
    pieces = {i: piece for piece, i in marian.items()}
    engine = ctranslate2.Translator(str(model_directory), device="cpu", intra_threads=1)
    results = engine.translate_batch(
        [[pieces[i] for i in ids] for ids in reference(name)["source_ids"]],
        beam_size=1,
        max_decoding_length=reference(name)["max_new_tokens"],
        return_end_token=True,
    )
    return [[marian[piece] for piece in result.hypotheses[0]] for result in results]


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_ctranslate2_export_decodes_as_ctranslate2s_own_conversion(name, imported_run, tmp_path):
    output = tmp_path / "ct2"
    cli.main(
        [
            "export",
            "--format",
            "ctranslate2",
            "--model",
            str(imported_run(name)),
            "--output",
            str(output),
        ]
    )
    assert ctranslate2_greedy(output, name) == reference(name)["ctranslate2_greedy_ids"]
    marian = json.loads((FIXTURES / name / "vocab.json").read_text(encoding="utf-8"))
    vocabulary = json.loads((output / "shared_vocabulary.json").read_text(encoding="utf-8"))
    assert vocabulary == [piece for piece in sorted(marian, key=marian.get) if piece != "<pad>"]
    config = json.loads((output / "config.json").read_text())
    special = [config[key] for key in ("decoder_start_token", "eos_token", "unk_token")]
    assert special == ["</s>", "</s>", "<unk>"] and not config["add_source_eos"]
    for spm in ("source.spm", "target.spm"):
        assert (output / spm).read_bytes() == (FIXTURES / name / spm).read_bytes()


def test_a_start_row_no_longer_zero_is_kept_as_the_decoders_start(imported_run, tmp_path):
    """Fine-tuning trains the BOS row (Marian's `<pad>`), so the decoder no longer starts from a
    zero embedding: the export keeps the row as CTranslate2's start token, never generated, and
    decodes as Keras does, one sentence a call for our limit of its length + extra."""
    run = tmp_path / "tuned"
    shutil.copytree(imported_run("classic"), run)
    translator = load_run(run)
    embeddings = translator.model.target_embedding.embeddings
    start = np.random.default_rng(1).normal(size=[1, translator.model.config.d_model])
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[BOS_ID]], start * 0.1))
    translator.model.save_weights(run / "model.weights.h5")
    translator = load_run(run)
    output = export_ctranslate2(translator, tmp_path / "ct2")
    config = json.loads((output / "config.json").read_text())
    assert config["decoder_start_token"] == "<pad>"
    engine = ctranslate2.Translator(str(output), device="cpu", intra_threads=1)
    tokenizer = translator.tokenizer
    ids = {piece: i for i, piece in enumerate(tokenizer.vocabulary)}
    sources = our_sources("classic")
    expected = greedy_decode(translator.model, pad_to_bucket(sources), extra_length=10).ids
    for source, row in zip(sources, expected.numpy().tolist(), strict=True):
        (result,) = engine.translate_batch(
            [tokenizer.pieces(source)],
            beam_size=1,
            max_decoding_length=len(source) + 10,
            min_decoding_length=0,
            return_end_token=True,
        )
        assert [ids[piece] for piece in result.hypotheses[0]] == until_eos(row)


def test_a_run_without_marians_vocabulary_is_refused_by_name(imported_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(imported_run("classic"), run)
    (run / "vocab.json").unlink()
    with pytest.raises(SystemExit, match="vocab.json not found"):
        cli.main(
            [
                "export",
                "--format",
                "ctranslate2",
                "--model",
                str(run),
                "--output",
                str(tmp_path / "ct2"),
            ]
        )
    assert not (tmp_path / "ct2").exists()
