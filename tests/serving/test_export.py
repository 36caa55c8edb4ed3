"""The SavedModel export: TF Serving's layout, its signatures, and translations equal to Keras's
beam search when loaded by a process that has none of this project's code."""

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import prediction_log_pb2

from keras_transformer import cli
from keras_transformer.decoding.search import beam_decode, greedy_decode
from keras_transformer.decoding.translator import load_run
from keras_transformer.export.layout import TFLITE_TOKENIZER_NOTE, tflite_tokenizer_directory
from keras_transformer.export.saved_model import (
    WARMUP_REQUESTS,
    TranslationModule,
    warmup_requests,
)
from keras_transformer.export.tflite import export_tflite
from keras_transformer.export.versions import versions
from keras_transformer.search_settings import SearchSettings
from keras_transformer.server.models.lifecycle import ServedModel
from pipelines.corpus import read_lines
from pipelines.tokenizer import EOS_ID

pytestmark = pytest.mark.slow  # exports SavedModels (XLA) and TFLite models

# The search settings a signature takes as tensors.
SEARCH_INPUTS = ("beam_size", "alpha", "extra_length")

# A process that knows only TensorFlow and tensorflow-text (for its ops), like a deployment.
LOAD_AND_TRANSLATE = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)
assert not any(m.startswith(("keras_transformer", "pipelines")) for m in sys.modules)
sentences = json.loads(sys.stdin.read())
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
result = serve(text=tf.constant(sentences))
print(json.dumps({
    "translations": [t.decode("utf-8") for t in result["translations"].numpy()],
    "scores": result["scores"].numpy().tolist(),
}))
"""


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translator's tokenizer)."""


@pytest.fixture(scope="module")
def translator(run_dir):
    return load_run(run_dir)


def test_layout_is_what_tensorflow_serving_loads(exported):
    version = exported / "1"
    assert (version / "saved_model.pb").is_file()
    assert list((version / "variables").glob("variables.index"))
    assert (version / "assets" / "subwords.model").is_file()
    assert [p.name for p in exported.iterdir()] == ["1"]  # no staging directory left behind


def test_saved_model_cli_lists_the_signatures_with_dtypes(exported):
    cli_path = Path(sys.executable).with_name("saved_model_cli")
    shown = subprocess.run(
        [str(cli_path), "show", "--dir", str(exported / "1"), "--all"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    out = shown.stdout
    signatures = ("serving_default", "translate_options", "translate_ids", "attention")
    for signature in (*signatures, "source_lengths"):
        assert f"signature_def['{signature}']" in out
    attention = out.split("signature_def['attention']")[1].split("signature_def[")[0]
    assert (
        "outputs['encoder_decoder_attention'] tensor_info:\n        dtype: DT_FLOAT\n"
        "        shape: (-1, 2, 4, -1, -1)" in attention
    )
    serving = out.split("signature_def['serving_default']")[1].split("signature_def[")[0]
    assert "inputs['text'] tensor_info:\n        dtype: DT_STRING" in serving
    assert "outputs['translations'] tensor_info:\n        dtype: DT_STRING" in serving
    assert "outputs['scores'] tensor_info:\n        dtype: DT_FLOAT" in serving


def test_fresh_process_translates_real_sentences_as_keras_does(exported, translator, multi30k_dir):
    sentences = read_lines(multi30k_dir / "test_2016_flickr.en.gz")[:12]
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD_AND_TRANSLATE, str(exported / "1")],
        input=json.dumps(sentences),
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",  # nothing of this checkout on the path
        env={"PATH": os.environ["PATH"], "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    served = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert served["translations"] == translator.translate(
        sentences, SearchSettings(beam_size=4, alpha=0.6)
    )
    assert any(served["translations"])


@pytest.fixture(scope="module")
def exported_jit(run_dir, tmp_path_factory):
    """`run_dir` exported with `--jit-compile`: the signatures search under XLA."""
    base = tmp_path_factory.mktemp("saved_models") / "m30k-ende-xla"
    cli.main(["export", "--model", str(run_dir), "--output", str(base), "--jit-compile"])
    return base


# The signatures under XLA: the plain export's cases, which the jit export's real sentences
# translated as Keras does (each signature a search of its own) cover under XLA.
JIT_LONG = pytest.mark.long(
    covered_by=[
        "tests/serving/test_export.py::test_jit_export_translates_real_sentences_as_keras_does"
    ]
)


def test_jit_export_translates_real_sentences_as_keras_does(exported_jit, translator, multi30k_dir):
    sentences = read_lines(multi30k_dir / "test_2016_flickr.en.gz")[:12]
    serve = tf.saved_model.load(str(exported_jit / "1")).signatures["serving_default"]
    served = [t.decode("utf-8") for t in serve(text=tf.constant(sentences))["translations"].numpy()]
    assert served == translator.translate(sentences, SearchSettings(beam_size=4, alpha=0.6))


# In a process whose XLA dumps what it compiles: requests of 3, 4, 5 and 6 rows at one width
# and search, then one row at two beam sizes and three extra lengths each. It prints how many
# searches XLA had compiled after each part.
REQUESTS_OF_ROWS_THEN_SEARCHES = """
import json, sys
from pathlib import Path
import tensorflow as tf
import tensorflow_text  # noqa: F401
serve = tf.saved_model.load(sys.argv[1]).signatures["translate_ids"]
compiled = lambda: len([*Path(sys.argv[2]).glob("*search_n_best*.before_optimizations.txt")])
counts = []
search = {"beam_size": tf.constant(2), "alpha": tf.constant(0.6), "extra_length": tf.constant(3)}
for rows in (3, 4, 5, 6):
    result = serve(source_ids=tf.constant([[40, 41, 2]] * rows), **search)
    assert result["target_ids"].shape[0] == result["scores"].shape[0] == rows
counts.append(compiled())
for beam_size in (2, 4):
    for extra_length in (3, 9, 50):
        search = {"alpha": tf.constant(0.6), "extra_length": tf.constant(extra_length)}
        serve(source_ids=tf.constant([[40, 41, 2]]), beam_size=tf.constant(beam_size), **search)
counts.append(compiled())
print(json.dumps(counts))
"""


def test_jit_export_compiles_one_program_per_row_bucket_and_beam_size(exported_jit, tmp_path):
    """Batches of 3, 4, 5 and 6 rows run the programs compiled for 3, 4 and 6 rows: three, not
    four. One row at beam sizes 2 and 4, each at three extra lengths, adds one program a beam
    size: the extra length is a tensor, not a shape."""
    environment = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={tmp_path}"}
    script = [sys.executable, "-c", REQUESTS_OF_ROWS_THEN_SEARCHES, str(exported_jit / "1")]
    ran = subprocess.run(
        [*script, str(tmp_path)], env=environment, check=True, capture_output=True, text=True
    )
    assert json.loads(ran.stdout.strip().splitlines()[-1]) == [3, 3 + 2]


def read_warmup(version):
    records = tf.data.TFRecordDataset(str(version / WARMUP_REQUESTS))
    return [prediction_log_pb2.PredictionLog.FromString(r.numpy()).predict_log for r in records]


def test_jit_export_warms_up_every_padded_width_with_the_default_search(exported_jit):
    """The test model's max_length is 24: widths 8, 16, 24, then one text request."""
    requests = [log.request for log in read_warmup(exported_jit / "1")]
    signatures = [r.model_spec.signature_name for r in requests]
    assert signatures == ["translate_ids"] * 3 + ["serving_default"]
    widths = [tf.make_ndarray(r.inputs["source_ids"]).shape for r in requests[:3]]
    assert widths == [(1, 8), (1, 16), (1, 24)]
    paper = SearchSettings()
    search = [tf.make_ndarray(requests[0].inputs[k]).item() for k in SEARCH_INPUTS]
    assert search == pytest.approx([paper.beam_size, paper.alpha, paper.extra_length])


def test_warmup_requests_cover_each_batch_size_asked_for_at_every_width():
    logs = warmup_requests("m", max_length=20, search=SearchSettings(), batch_sizes=(1, 3))
    shapes = [
        tf.make_ndarray(log.predict_log.request.inputs["source_ids"]).shape for log in logs[:-1]
    ]
    assert shapes == [(1, 8), (1, 16), (1, 20), (3, 8), (3, 16), (3, 20)]
    assert logs[-1].predict_log.request.model_spec.signature_name == "serving_default"


def test_warmup_batch_sizes_need_jit_compile(run_dir, tmp_path):
    arguments = ["--model", str(run_dir), "--output", str(tmp_path / "m")]
    with pytest.raises(SystemExit, match="warmup_batch_sizes needs jit_compile"):
        cli.main(["export", *arguments, "--warmup-batch-sizes", "1", "8"])
    assert not (tmp_path / "m").exists()


def test_served_model_runs_the_warmup_requests_at_load(exported, exported_jit, tmp_path):
    assert ServedModel("m30k-ende", exported).warmup_requests == 0
    assert not (exported / "1" / WARMUP_REQUESTS).exists()
    assert ServedModel("m30k-ende", exported_jit).warmup_requests == 4
    broken = tmp_path / "broken"
    shutil.copytree(exported_jit, broken)
    (log,) = read_warmup(broken / "1")[:1]
    log.request.inputs["beam_size"].CopyFrom(tf.make_tensor_proto(0, tf.int32))
    with tf.io.TFRecordWriter(str(broken / "1" / WARMUP_REQUESTS)) as writer:
        writer.write(prediction_log_pb2.PredictionLog(predict_log=log).SerializeToString())
    with pytest.raises(ValueError, match="(?s)warm-up request 1 of .*beam_size 0 is not one of"):
        ServedModel("m30k-ende", broken)


def test_jit_compile_is_refused_for_tflite(run_dir, tmp_path):
    arguments = ["--model", str(run_dir), "--format", "tflite", "--output", str(tmp_path / "m")]
    with pytest.raises(SystemExit, match="jit_compile applies to SavedModel exports"):
        cli.main(["export", *arguments, "--jit-compile"])


def keras_best(model, source, beam_size):
    """Keras's own search: beam search's best hypothesis, or greedy decoding at beam 1."""
    if beam_size == 1:
        result = greedy_decode(model, source, extra_length=5)
        return result.ids, result.log_probs
    result = beam_decode(model, source, beam_size=beam_size, alpha=0.6, extra_length=5)
    return result.ids[:, 0], result.scores[:, 0]


def xla_compiled_functions(version):
    """Names of the saved graph's functions marked for XLA compilation."""
    saved = saved_model_pb2.SavedModel.FromString((version / "saved_model.pb").read_bytes())
    library = saved.meta_graphs[0].graph_def.library.function
    return [f.signature.name for f in library if f.attr["_XlaMustCompile"].b]


def test_only_the_jit_export_saves_an_xla_compiled_search(exported, exported_jit):
    assert xla_compiled_functions(exported / "1") == []
    assert xla_compiled_functions(exported_jit / "1")


@pytest.mark.parametrize("export", ["exported", pytest.param("exported_jit", marks=JIT_LONG)])
@pytest.mark.parametrize("beam_size", [2, 1])
def test_ids_signature_equals_keras_search(export, request, translator, beam_size):
    """Also with XLA, whose search pads the source width to a bucket and the 5 rows to 6: the same
    ids and width."""
    module = tf.saved_model.load(str(request.getfixturevalue(export) / "1"))
    source = np.array(
        [
            [40, 41, 42, 2, 0],
            [43, 2, 0, 0, 0],
            [44, 45, 2, 0, 0],
            [46, 2, 0, 0, 0],
            [47, 48, 49, 50, 2],
        ],
        np.int32,
    )
    served = module.signatures["translate_ids"](
        source_ids=tf.constant(source),
        beam_size=tf.constant(beam_size),
        alpha=tf.constant(0.6),
        extra_length=tf.constant(5),
    )
    ids, scores = keras_best(translator.model, source, beam_size)
    np.testing.assert_array_equal(served["target_ids"].numpy(), ids.numpy())
    np.testing.assert_allclose(served["scores"], scores, atol=1e-5)


TFLITE_SOURCE = 16  # the test model's max_length is 24: 16 source + 6 extra target positions


def tflite_runner(path):
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=str(path)).get_signature_runner("translate")


def padded_sources(translator, sentences):
    rows = [
        ids if len(ids) <= TFLITE_SOURCE else ids[: TFLITE_SOURCE - 1] + [EOS_ID]
        for ids in translator.encode_sentences(sentences)
    ]
    return [np.array([row + [0] * (TFLITE_SOURCE - len(row))], np.int32) for row in rows]


@pytest.fixture(scope="module")
def tflite_float(run_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("tflite") / "m30k-ende.tflite"
    arguments = ["--model", str(run_dir), "--format", "tflite", "--output", str(path)]
    cli.main(["export", *arguments, "--source-length", str(TFLITE_SOURCE), "--extra-length", "6"])
    return path


def test_tflite_translates_real_sentences_as_the_saved_model(
    tflite_float, exported, translator, multi30k_dir
):
    runner = tflite_runner(tflite_float)
    serve_ids = tf.saved_model.load(str(exported / "1")).signatures["translate_ids"]
    sentences = read_lines(multi30k_dir / "test_2016_flickr.en.gz")[:6]
    for source in padded_sources(translator, sentences):
        lite = runner(source_ids=source)
        served = serve_ids(
            source_ids=tf.constant(source),
            beam_size=tf.constant(4),
            alpha=tf.constant(0.6),
            extra_length=tf.constant(6),
        )
        np.testing.assert_array_equal(lite["target_ids"], served["target_ids"].numpy())
        np.testing.assert_allclose(lite["scores"], served["scores"].numpy(), atol=1e-4)


def test_tflite_searches_with_its_min_length_and_penalty(translator, multi30k_dir, tmp_path):
    """The search fixed in a TFLite model, a minimum length and the |Y|^α penalty included,
    gives the `Translator`'s ids and scores under the same settings; no output ends before
    `min_length` tokens."""
    search = SearchSettings(beam_size=2, alpha=1.0, penalty="length", extra_length=6)
    search = search.replace(min_length=5)
    path = export_tflite(
        translator, tmp_path / "m.tflite", source_length=TFLITE_SOURCE, search=search
    )
    runner = tflite_runner(path)
    sentences = read_lines(multi30k_dir / "test_2016_flickr.en.gz")[:4]
    for source in padded_sources(translator, sentences):
        lite = runner(source_ids=source)
        ids, scores = translator.decode_ids(source, search)
        np.testing.assert_array_equal(lite["target_ids"], ids.numpy())
        np.testing.assert_allclose(lite["scores"], scores.numpy(), atol=1e-4)
        assert EOS_ID not in lite["target_ids"][0, : search.min_length].tolist()


def test_tflite_ships_its_subword_model_and_how_to_tokenize(tflite_float, run_dir):
    directory = tflite_tokenizer_directory(tflite_float)
    note = json.loads((directory / TFLITE_TOKENIZER_NOTE).read_text(encoding="utf-8"))
    model = directory / note["subword_model"]
    assert model.read_bytes() == (run_dir / "subwords.model").read_bytes()
    assert (note["eos_id"], note["source_length"]) == (EOS_ID, TFLITE_SOURCE)


def test_tflite_uses_builtin_ops_and_quantizes(tflite_float, run_dir, translator, tmp_path):
    quantized = tmp_path / "quantized.tflite"
    arguments = ["--model", str(run_dir), "--format", "tflite", "--output", str(quantized)]
    cli.main(
        ["export", *arguments, "--source-length", str(TFLITE_SOURCE), "--extra-length", "6"]
        + ["--quantize", "dynamic"]
    )
    assert quantized.stat().st_size < 0.6 * tflite_float.stat().st_size
    source = padded_sources(translator, ["A dog runs on the beach."])[0]
    target = tflite_runner(quantized)(source_ids=source)["target_ids"]
    assert target.shape == (1, TFLITE_SOURCE + 6) and target.min() >= 0
    with pytest.raises(ValueError, match="source_length 40 must be in 2..24"):
        export_tflite(translator, tmp_path / "x.tflite", source_length=40)


def test_tflite_float16_translates_as_float32(tflite_float, run_dir, translator, tmp_path, capsys):
    """float16 weights, float32 arithmetic: half the size, and on this model the same ids as
    float32, with scores within float16's rounding."""
    half = tmp_path / "float16.tflite"
    arguments = ["--model", str(run_dir), "--format", "tflite", "--output", str(half)]
    cli.main(
        ["export", *arguments, "--source-length", str(TFLITE_SOURCE), "--extra-length", "6"]
        + ["--quantize", "float16"]
    )
    size = half.stat().st_size
    assert f"exported {half} ({size / 2**20:.1f} MiB)" in capsys.readouterr().out
    assert size < 0.6 * tflite_float.stat().st_size
    full, lite = tflite_runner(tflite_float), tflite_runner(half)
    sentences = ["A dog runs on the beach.", "Two men are talking.", "A girl in a red coat."]
    for source in padded_sources(translator, sentences):
        expected, served = full(source_ids=source), lite(source_ids=source)
        np.testing.assert_array_equal(served["target_ids"], expected["target_ids"])
        np.testing.assert_allclose(served["scores"], expected["scores"], atol=1e-2)


def test_two_concurrent_exports_take_the_next_versions_and_log_no_tensorflow_info(
    exported, run_dir, translator, tmp_path, caplog
):
    """Two exports at once into a base path holding version 1, one by the command and one by the
    Python API, give versions 2 and 3, both complete. TensorFlow's INFO records at a SavedModel
    export (absl lists every renamed captured tensor, thousands of characters a signature) stay
    out of the log."""
    from concurrent.futures import ThreadPoolExecutor

    from keras_transformer.export.saved_model import export_saved_model

    base = tmp_path / "m30k-ende"
    shutil.copytree(exported, base)  # the shared export stays at version 1 for other tests
    caplog.set_level(logging.INFO)
    with ThreadPoolExecutor(1) as pool:  # the command in this thread: it sets signal handlers
        api_export = pool.submit(export_saved_model, translator, base)
        cli.main(["export", "--model", str(run_dir), "--output", str(base)])
        api_export.result()
    assert versions(base) == [1, 2, 3]
    assert sorted(p.name for p in base.iterdir()) == ["1", "2", "3"]  # nothing else left
    for version in ("2", "3"):
        assert tf.saved_model.load(str(base / version)).signatures["serving_default"] is not None
    chatter = [r for r in caplog.records if r.name in ("absl", "tensorflow")]
    assert not chatter, [r.getMessage()[:200] for r in chatter]
    assert any(r.name == "keras_transformer.export.versions" for r in caplog.records)


@pytest.mark.parametrize("export", ["exported", pytest.param("exported_jit", marks=JIT_LONG)])
@pytest.mark.parametrize("beam_size", [2, 1])
def test_options_signature_returns_the_translators_n_best_and_scores(
    export, request, translator, multi30k_dir, beam_size
):
    sentences = read_lines(multi30k_dir / "test_2016_flickr.en.gz")[:5]
    serve = tf.saved_model.load(str(request.getfixturevalue(export) / "1")).signatures
    search = SearchSettings(beam_size=beam_size, alpha=0.6, extra_length=5, n_best=beam_size)
    served = serve["translate_options"](
        text=tf.constant(sentences),
        **{name: tf.constant(getattr(search, name)) for name in SEARCH_INPUTS},
    )
    expected = translator.translate_n_best(sentences, search)
    texts = served["n_best_translations"].numpy()
    assert texts.shape == (5, beam_size)
    assert [[t.decode() for t in row] for row in texts] == [[h.text for h in e] for e in expected]
    np.testing.assert_allclose(
        served["n_best_scores"], [[h.score for h in e] for e in expected], atol=1e-4
    )
    np.testing.assert_allclose(
        served["n_best_log_probs"], [[h.log_prob for h in e] for e in expected], atol=1e-4
    )
    # The outputs TF Serving clients already read keep their meaning.
    assert [t.decode() for t in served["translations"].numpy()] == [e[0].text for e in expected]
    best = [e[0].log_prob if beam_size == 1 else e[0].score for e in expected]
    np.testing.assert_allclose(served["scores"], best, atol=1e-4)


def test_search_outside_the_exported_set_is_invalid_argument(exported):
    serve = tf.saved_model.load(str(exported / "1")).signatures["translate_options"]
    text = tf.constant(["A dog."])
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"beam_size 3 is not one of those exported: 1, 2, 4, 8",
    ):
        serve(
            text=text, beam_size=tf.constant(3), alpha=tf.constant(0.6), extra_length=tf.constant(5)
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"extra_length 51 is not in 0\.\.50"):
        serve(
            text=text,
            beam_size=tf.constant(2),
            alpha=tf.constant(0.6),
            extra_length=tf.constant(51),
        )


def test_requests_within_the_set_trace_nothing_new(translator):
    """Every beam size of the set is traced once, at the signature's own tracing; requests of
    any of them at any extra length run those traces."""
    module = TranslationModule(translator.model, translator.tokenizer, jit_compile=True)
    text = tf.constant(["A dog runs.", "People."])
    for beam_size in module.beam_sizes:
        for extra_length in (0, 7, module.longest_extra):
            search = {"alpha": tf.constant(0.6), "extra_length": tf.constant(extra_length)}
            module.serve_text_options(text, tf.constant(beam_size), **search)
    assert module.serve_text_options.experimental_get_tracing_count() == 1
    assert module._n_best.experimental_get_tracing_count() == len(module.beam_sizes)


@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=JIT_LONG)])
def test_signatures_search_with_the_exports_min_length(translator, jit_compile):
    """The same inputs as before (clients of earlier exports keep working), the export's minimum
    length: at the longest output, every translation is that long."""
    search = SearchSettings(min_length=translator.model.config.max_length)
    module = TranslationModule(translator.model, translator.tokenizer, search, None, jit_compile)
    source = tf.constant([[40, 41, 42, 2], [43, 2, 0, 0]])
    served = module.serve_ids(source, tf.constant(2), tf.constant(0.6), tf.constant(5))
    lengths = (served["target_ids"].numpy() != 0).sum(axis=1)
    np.testing.assert_array_equal(lengths, [4 + 5, 2 + 5])
    assert not np.any(served["target_ids"].numpy() == EOS_ID)
