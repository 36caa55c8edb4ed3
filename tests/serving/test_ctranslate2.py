"""The CTranslate2 export: CTranslate2 decodes our weights into our translations, scored by our
model.

A tiny model trained for a few seconds on Multi30k pairs translates them (sharp, real German)
and unseen sentences (flatter distributions, some running to the length limit). CTranslate2,
given our search's settings, must return the same tokens: greedy, and beam 4 without a length
penalty except where our beam search, which may finish more candidates, finds a more probable
translation. Its scores are our model's log-probabilities normalized as CTranslate2 normalizes
them: the tokens never generated (PAD, BOS) are ruled out before its log-softmax, where ours
rules them out after the log-softmax over the full vocabulary, as transformers and fairseq do
(so CTranslate2's scores are higher than ours by the probability those tokens held). With α = 0.6
the two beam searches rank hypotheses by different penalties (ours GNMT's ((5 + |Y|) / 6)^α,
CTranslate2's |Y|^α), which no option maps.
"""

import gzip
import json
import shutil
from types import SimpleNamespace

import ctranslate2
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig, cli
from keras_transformer.decoding.ensemble import Ensemble
from keras_transformer.decoding.search import NEVER_GENERATED
from keras_transformer.decoding.translator import load_run, pad_to_bucket
from keras_transformer.export.ctranslate2_export import CTranslate2ExportError, export_ctranslate2
from keras_transformer.search_settings import SearchSettings
from keras_transformer.training.trainer import compile_model
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer

TRAINED_PAIRS = 32
UNSEEN = range(200, 216)  # validation lines the model never trained on
STEPS = 120


def first_lines(path, lines):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for line, _ in zip(f, range(max(lines) + 1), strict=False)]


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translator's tokenizer)."""


def run_with(run_dir, directory, **changes):
    """A copy of `run_dir` with its config changed and new random weights for it (an output
    bias too, which starts at 0)."""
    shutil.copytree(run_dir, directory)
    config = TransformerConfig.from_file(run_dir / "config.json").replace(**changes)
    (directory / "config.json").write_text(config.to_json())
    model = Transformer(config)
    if config.output_bias:
        projection = model.output_projection
        bias = model.target_embedding.logits_bias if projection is None else projection.bias
        bias.assign(np.random.default_rng(0).normal(size=bias.shape))
    model.save_weights(directory / "model.weights.h5")
    return directory


@pytest.fixture(scope="module")
def sources(multi30k_dir):
    english = first_lines(multi30k_dir / "val.en.gz", UNSEEN)
    return english[:TRAINED_PAIRS] + [english[i] for i in UNSEEN]


@pytest.fixture(scope="module")
def trained_run(run_dir, multi30k_dir, tmp_path_factory):
    """`run_dir`'s subword model, and a tiny model trained on its first validation pairs."""
    directory = tmp_path_factory.mktemp("trained_run")
    for name in ("subwords.model", "run.json"):
        shutil.copy(run_dir / name, directory / name)
    config = TransformerConfig.preset(
        "tiny", vocab_size=500, max_length=64, residual_dropout=0.0, warmup_steps=40
    )
    (directory / "config.json").write_text(config.to_json())
    tokenizer = SubwordTokenizer(directory / "subwords.model")

    def ids(language):
        lines = first_lines(multi30k_dir / f"val.{language}.gz", range(TRAINED_PAIRS))
        return tokenizer.tokenize(tf.constant(lines)).to_list()

    source, target = ids("en"), ids("de")
    x = (
        pad_to_bucket([s + [EOS_ID] for s in source]),
        pad_to_bucket([[BOS_ID] + t for t in target]),
    )
    y = pad_to_bucket([t + [EOS_ID] for t in target])
    tf.keras.utils.set_random_seed(3)
    model = compile_model(config)
    batches = tf.data.Dataset.from_tensors((x, y)).repeat()
    model.fit(batches, epochs=STEPS // 20, steps_per_epoch=20, verbose=0)
    model.save_weights(directory / "model.weights.h5")
    return directory


@pytest.fixture(scope="module")
def translator(trained_run):
    return load_run(trained_run)


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    output = tmp_path_factory.mktemp("ctranslate2") / "model"
    cli.main(
        ["export", "--format", "ctranslate2", "--model", str(trained_run), "--output", str(output)]
    )
    return output


@pytest.fixture(scope="module")
def engine(exported):
    return ctranslate2.Translator(str(exported), device="cpu", intra_threads=1)


def ours(translator, sources, search):
    """Our `Translator`'s best ids (up to EOS, included) and scores, in one padded batch."""
    source_ids = translator.encode_sentences(sources)
    target_ids, scores = translator.decode_ids(pad_to_bucket(source_ids), search)
    return [until_eos(row) for row in target_ids.numpy().tolist()], scores.numpy()


def until_eos(ids):
    ids = [i for i in ids if i != PAD_ID]
    return ids[: ids.index(EOS_ID) + 1] if EOS_ID in ids else ids


def theirs(engine, translator, sources, search):
    """CTranslate2's best ids and scores, our search's settings mapped onto its options: one
    sentence a call, for our per-sentence limit of input length (EOS included) + extra."""
    max_length = translator.model.config.max_length
    tokenizer = translator.tokenizer
    ids = {piece: i for i, piece in enumerate(tokenizer.pieces(range(tokenizer.vocab_size)))}
    hypotheses, scores = [], []
    for source_ids in translator.encode_sentences(sources):
        (result,) = engine.translate_batch(
            [tokenizer.pieces(source_ids[:-1])],  # the export appends EOS itself
            beam_size=search.beam_size,
            length_penalty=search.alpha,
            max_decoding_length=min(len(source_ids) + search.extra_length, max_length),
            min_decoding_length=0,  # ours may end at once; CTranslate2's default bans it
            return_end_token=True,  # EOS counted in |Y|, as ours counts it
            return_scores=True,
        )
        hypotheses.append([ids[piece] for piece in result.hypotheses[0]])
        scores.append(result.scores[0])
    return hypotheses, np.array(scores)


def log_probability(translator, source, target_ids, ctranslate2_rule=True):
    """log P(target | source) by our model's full forward pass (teacher forcing). By
    CTranslate2's rule the tokens never generated are left out of the softmax; by ours
    (`ctranslate2_rule=False`) they are in it, as our searches normalize."""
    source_ids = translator.encode_sentences([source])
    logits = translator.model((np.array(source_ids), np.array([[BOS_ID, *target_ids[:-1]]])))
    logits = tf.transpose(logits[0])
    if ctranslate2_rule:
        logits = tf.tensor_scatter_nd_update(
            logits,
            [[i] for i in NEVER_GENERATED],
            tf.fill([len(NEVER_GENERATED), len(target_ids)], -1e9),
        )
    log_probs = tf.nn.log_softmax(tf.transpose(logits)).numpy()
    return sum(log_probs[i, t] for i, t in enumerate(target_ids))


def ctranslate2_scores(translator, sources, hypotheses):
    """Each hypothesis' log-probability by CTranslate2's rule (`log_probability`)."""
    return np.array(
        [log_probability(translator, *pair) for pair in zip(sources, hypotheses, strict=True)]
    )


@pytest.mark.parametrize("extra_length", [50, 2])
def test_greedy_translations_and_scores_equal_ours(translator, engine, sources, extra_length):
    """Extra length 2 makes some sentences stop at their limit, without EOS."""
    search = SearchSettings(beam_size=1, alpha=0.0, extra_length=extra_length)
    our_ids, our_scores = ours(translator, sources, search)
    their_ids, their_scores = theirs(engine, translator, sources, search)
    assert their_ids == our_ids
    expected = ctranslate2_scores(translator, sources, our_ids)
    np.testing.assert_allclose(their_scores, expected, atol=2e-4, rtol=1e-5)
    assert np.all(our_scores < their_scores)  # by the probability PAD and BOS held
    ended = sum(ids[-1] == EOS_ID for ids in our_ids)
    assert 0 < ended < len(sources) if extra_length == 2 else ended > 0
    assert len({tuple(ids) for ids in our_ids}) > len(sources) // 2, "outputs are not trivial"


@pytest.mark.parametrize("extra_length", [50, 2])
def test_beam_translations_and_scores_equal_ours_or_ours_is_more_probable(
    translator, engine, sources, extra_length
):
    """Beam 4, α = 0. Both searches keep the same alive hypotheses, the 4 best candidates of a
    step that do not end; they differ in which may finish. CTranslate2 finishes a candidate
    only among the 4 best of its step; ours among the 8 best (tensor2tensor's rule). Ours so
    holds every finished hypothesis CTranslate2 holds, and some more: where the two differ,
    ours is more probable under our model. (The two normalize apart, so a step's candidates of
    two parents may also rank apart.) CTranslate2's scores are our model's log-probabilities by
    its rule all the same."""
    search = SearchSettings(beam_size=4, alpha=0.0, extra_length=extra_length)
    our_ids, our_scores = ours(translator, sources, search)
    their_ids, their_scores = theirs(engine, translator, sources, search)
    expected = ctranslate2_scores(translator, sources, their_ids)
    np.testing.assert_allclose(their_scores, expected, atol=2e-4, rtol=1e-5)
    differ = [i for i, ids in enumerate(our_ids) if ids != their_ids[i]]
    assert len(differ) <= len(sources) // 10, f"sentences {differ} differ"
    for i in differ:
        assert our_scores[i] > log_probability(translator, sources[i], their_ids[i], False)


def test_length_normalized_scores_are_our_models(translator, engine, sources):
    """α = 0.6: each of CTranslate2's hypotheses scores log P(Y) / |Y|^α with our model's P."""
    their_ids, their_scores = theirs(engine, translator, sources, SearchSettings())
    for source, ids, score in zip(sources, their_ids, their_scores, strict=True):
        expected = log_probability(translator, source, ids) / len(ids) ** 0.6
        np.testing.assert_allclose(score, expected, atol=2e-4, rtol=1e-5)


def test_quantized_export_translates(trained_run, translator, exported, sources, tmp_path):
    output = tmp_path / "int8"
    cli.main(
        [
            "export",
            "--format",
            "ctranslate2",
            "--model",
            str(trained_run),
            "--output",
            str(output),
            "--quantization",
            "int8",
        ]
    )
    assert (output / "model.bin").stat().st_size < (exported / "model.bin").stat().st_size / 2
    engine = ctranslate2.Translator(str(output), device="cpu", intra_threads=1)
    source_ids = translator.encode_sentences(sources[:4])
    results = engine.translate_batch([translator.tokenizer.pieces(s[:-1]) for s in source_ids])
    assert all(result.hypotheses[0] for result in results)


def test_the_directory_holds_the_vocabulary_and_the_subword_model(exported, trained_run):
    assert (exported / "subwords.model").read_bytes() == (
        trained_run / "subwords.model"
    ).read_bytes()
    tokenizer = SubwordTokenizer(trained_run / "subwords.model")
    vocabulary = json.loads((exported / "shared_vocabulary.json").read_text(encoding="utf-8"))
    assert vocabulary == tokenizer.pieces(range(tokenizer.vocab_size))
    config = json.loads((exported / "config.json").read_text())
    special = (config["bos_token"], config["eos_token"], config["unk_token"])
    assert special == ("<s>", "</s>", "<unk>")
    assert config["add_source_eos"] and config["layer_norm_epsilon"] == 1e-6


@pytest.mark.parametrize(
    "changes",
    [
        dict(positional_encoding="learned"),
        dict(tie_embeddings=False, layer_norm_epsilon=0.5),
        # OPUS-MT's classic Marian models
        dict(ffn_activation="swish", output_bias=True, sinusoid_layout="halves"),
        dict(ffn_activation="gelu", output_bias=True, tie_embeddings=False),
    ],
)
def test_every_representable_configuration_scores_as_ours(run_dir, sources, tmp_path, changes):
    """Learned positions, an untied output projection, another ε, the FFN's other activations,
    an output bias and Marian's sinusoids, on random weights: CTranslate2 scores a translation
    as our model does, and decodes greedily to our ids."""
    translator = load_run(run_with(run_dir, tmp_path / "run", **changes))
    engine = ctranslate2.Translator(str(export_ctranslate2(translator, tmp_path / "ct2")))
    greedy = SearchSettings(beam_size=1, alpha=0.0, extra_length=6)
    assert (
        theirs(engine, translator, sources[:4], greedy)[0]
        == ours(translator, sources[:4], greedy)[0]
    )
    target = [17, 230, 41, 99, EOS_ID]
    source_ids = translator.encode_sentences(sources[:1])[0]
    (result,) = engine.score_batch(
        [translator.tokenizer.pieces(source_ids[:-1])], [translator.tokenizer.pieces(target[:-1])]
    )
    expected = log_probability(translator, sources[0], target)
    np.testing.assert_allclose(sum(result.log_probs), expected, atol=1e-4, rtol=1e-5)


def test_unrepresentable_configurations_are_refused_by_name(run_dir, tmp_path):
    directory = run_with(run_dir, tmp_path / "run", d_k=8)
    output = tmp_path / "out"
    with pytest.raises(SystemExit, match="d_k=8 and d_v=16 differ"):
        cli.main(
            [
                "export",
                "--format",
                "ctranslate2",
                "--model",
                str(directory),
                "--output",
                str(output),
            ]
        )
    assert not list(tmp_path.glob("*out*")), "a refused export leaves nothing behind"


def test_ensembles_constraints_quantizations_and_existing_outputs_are_refused(
    translator, exported, tmp_path
):
    ensemble = Ensemble([translator.model, translator.model])
    for refused, reason in [
        (SimpleNamespace(model=ensemble, constraint=None), "not an ensemble"),
        (SimpleNamespace(model=translator.model, constraint=object()), "well-formed trees"),
        (translator, "'int4' is not one of CTranslate2's"),
    ]:
        with pytest.raises(CTranslate2ExportError, match=reason):
            export_ctranslate2(refused, tmp_path / "out", quantization="int4")
    with pytest.raises(CTranslate2ExportError, match="already exists"):
        export_ctranslate2(translator, exported)
    assert not list(tmp_path.iterdir())


def test_quantizations_of_another_format_are_refused(trained_run, tmp_path):
    arguments = ["export", "--model", str(trained_run), "--output", str(tmp_path / "saved")]
    with pytest.raises(SystemExit, match="quantization applies to format ctranslate2"):
        cli.main([*arguments, "--quantization", "int8"])
    with pytest.raises(SystemExit, match="quantize applies to format tflite"):
        cli.main([*arguments, "--quantize", "float16"])
    assert not (tmp_path / "saved").exists()
