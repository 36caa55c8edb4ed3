"""Export for serving: a SavedModel whose signatures translate raw strings with §6.1's beam search.

The directory layout is the one TensorFlow Serving loads, one integer version per export
(`versions.write_next_version`: the next number, written whole or not at all):

    <base>/<version>/saved_model.pb, variables/, assets/subwords.model

Signatures (everything in the graph: tokenization, beam search with its cache, detokenization):

    serving_default    text [None] string                       -> translations [None] string,
                                                                   scores [None] float32
    translate_options  text, beam_size [] int32, alpha [] float32,
                       extra_length [] int32                    -> translations, scores,
                                                                   n_best_translations
                                                                   [None, beam] string,
                                                                   n_best_scores [None, beam],
                                                                   n_best_log_probs [None, beam]
    translate_ids      source_ids [None, None] int32 (PAD = 0, EOS-terminated, at most
                       max_length wide), beam_size, alpha,
                       extra_length                             -> target_ids [None, None] int32,
                                                                   scores
    attention          text, translation [None] string          -> source_pieces [None, S] string,
                                                                   target_pieces [None, T] string,
                                                                   encoder_decoder_attention
                                                                   [None, L, H, T, S] float32,
                                                                   encoder_self_attention
                                                                   [None, L, H, S, S] float32
    source_lengths     text                                     -> source_lengths [None] int32

A beam size of 1 decodes greedily (`scores` are then log-probabilities, as `Translator` gives).
`translate_options` also returns every hypothesis the search kept, best first: `n_best_scores`
are log P / lp (§6.1), for a greedy search too, and `n_best_log_probs` log P, EOS included; a
slot the search left empty (fewer distinct hypotheses than beams) has an empty translation and
`NEG_INF` scores.
`attention` runs the model once over the given translation (teacher forcing,
`forced.attention_weights`) and returns every layer's heads, each row a query's weights over the
source, as the paper's Figures 3-5 draw them; the pieces label them (EOS as "</s>", padding "").
It never uses XLA. `source_lengths` counts a sentence's subwords and EOS before the cut at
`max_length` that the text signatures make, so that a client can split a longer sentence instead.
Each version also holds `layout.MODEL_INFO`: the languages it translates, for a server to list,
and `serving_default`'s search, which a server's other APIs search with too.

Requests search from a fixed set, so that they cannot make a server compile without bound: a
beam size of `REQUEST_BEAM_SIZES` or `serving_default`'s, and an extra length from 0 to the
larger of `serving_default`'s and §6.1's 50 (`TranslationModule.longest_extra`), with a finite
α >= 0, and `translate_ids` rows no wider than `max_length`. The graph checks them before
decoding and answers InvalidArgument naming the value and what is allowed, so that stock
TensorFlow Serving refuses them too; a request is never rounded to another search.
With XLA, each beam size is its own program (a `tf.switch_case` branch), and the buffers are
sized for the longest extra length, which a request's extra length only limits
(`search.greedy_decode`'s `longest_extra`): one program per beam size, request shape and padded
width, whatever extra lengths the requests ask for.
`serving_default` uses the paper's beam 4, α = 0.6 and input length + 50 (or the search given at
export: an imported checkpoint's own, or §6.3's for a parser: its outputs are linearized trees,
repaired by the caller with `keras_transformer.parsing.constituency.repaired_tree`, or
well-formed as decoded when the translator carries a `tree_constraint.WellFormedTrees`, which
then goes into every signature).
TensorFlow Serving requires every input of a signature, so the search settings get a signature of
their own rather than optional inputs. The minimum length (`SearchSettings.min_length`, 0 by
default) and the length penalty's form (`penalty`) are the export's, in every signature: an input
for them would be one that the clients of earlier exports do not send.
With `jit_compile=True` (`keras-transformer export --jit-compile`) the signatures run their search
as one XLA program, which answers a request in much less time (docs/PERFORMANCE.md). XLA compiles
once per request shape and search settings, seconds each; the search pads a request's batch to
a size in `translator.ROW_BUCKETS` (1, 2, 3, 4, 6, 8, 12, ...) and its source width to a multiple of
`translator.LENGTH_BUCKET`, so a server compiles a bounded set of programs, not one per batch
size and width. Such an export also holds TensorFlow Serving's warm-up requests
(`WARMUP_REQUESTS`): one sentence (or each batch size asked for at export) at every padded width
up to `WARMUP_MAX_WIDTH` with `serving_default`'s search, compiled when a server loads the
version rather than on a user's request; other batches compile on their first request (with TF
Serving's batching, `allowed_batch_sizes` taken from `ROW_BUCKETS` and warmed up at export meet
the same programs).
TensorFlow Serving runs such a model only when started with `--xla_cpu_compilation_enabled=true`.
Only core TensorFlow ops and tensorflow-text's `SentencepieceTokenizer` /
`FastWordpieceTokenizer` ops appear; beams are reordered with plain gathers (no `GatherTree`).
Loading needs `import tensorflow_text` (it registers those ops) and none of this project's code.

Example (needs a trained run, so not run as a doctest)::

    export_saved_model(load_run("runs/m30k-ende"), "saved_models/m30k-ende")  # .../1/
"""

import functools
import logging
from pathlib import Path

import tensorflow as tf

from keras_transformer.decoding.beam_search import BeamSearchResult
from keras_transformer.decoding.forced import attention_weights
from keras_transformer.decoding.search import best_of, n_best_search
from keras_transformer.decoding.translator import LENGTH_BUCKET, bucketed_width, pad_rows_to_bucket
from keras_transformer.export.layout import WARMUP_REQUESTS
from keras_transformer.export.versions import model_info, write_model_info, write_next_version
from keras_transformer.search_settings import SearchSettings
from pipelines.tokenizer import EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

TEXT = tf.TensorSpec([None], tf.string, name="text")
TRANSLATION = tf.TensorSpec([None], tf.string, name="translation")
SOURCE_IDS = tf.TensorSpec([None, None], tf.int32, name="source_ids")
BEAM = tf.TensorSpec([], tf.int32, name="beam_size")
ALPHA_SPEC = tf.TensorSpec([], tf.float32, name="alpha")
EXTRA = tf.TensorSpec([], tf.int32, name="extra_length")


# The beam sizes a request may ask for, besides `serving_default`'s: each is a program of its
# own under XLA, and the decoding cache, and so a request's memory, grows with the beam.
REQUEST_BEAM_SIZES = (1, 2, 4, 8)


def refusal(condition, template, value):
    """An Assert that fails unless `condition`, its message `template` (`tf.strings.format`'s,
    `{}` for `value`) naming the input: a server answers it as InvalidArgument, TensorFlow
    Serving too."""
    return tf.debugging.Assert(condition, [tf.strings.format(template, value)])


def checked_request_search(beam_size, alpha, extra_length, beam_sizes, longest_extra):
    """A request's `beam_size`, `alpha` and `extra_length` once checked (one of `beam_sizes`, a
    finite α >= 0, 0 to `longest_extra`); otherwise running the signature raises
    InvalidArgumentError, naming the value and what is allowed, before any decoding (a NaN α
    would score every hypothesis NaN)."""
    allowed = ", ".join(map(str, beam_sizes))
    checks = [
        refusal(
            tf.reduce_any(tf.equal(beam_size, beam_sizes)),
            f"beam_size {{}} is not one of those exported: {allowed}",
            beam_size,
        ),
        refusal(
            tf.math.is_finite(alpha) & (alpha >= 0.0),
            "alpha {} is not a finite number >= 0",
            alpha,
        ),
        refusal(
            (extra_length >= 0) & (extra_length <= longest_extra),
            f"extra_length {{}} is not in 0..{longest_extra}",
            extra_length,
        ),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(beam_size), tf.identity(alpha), tf.identity(extra_length)


def checked_width(source_ids, max_length):
    """Source ids `[batch, width]` once checked to fit the model's `max_length` positions (the
    text signatures cut a source there; ids are the caller's to cut)."""
    width = tf.shape(source_ids)[1]
    check = refusal(
        width <= max_length, f"source_ids width {{}} is over max_length {max_length}", width
    )
    with tf.control_dependencies([check]):
        return tf.identity(source_ids)


class TranslationModule(tf.Module):
    """The trained model and its tokenizer with the serving functions (see module docstring).

    Attributes:
        default_search: `serving_default`'s `SearchSettings` (its `n_best` is not used: the
            signatures return the best hypothesis, or every one the search kept; its
            `min_length` is every signature's).
        beam_sizes: the beam sizes requests may ask for (sorted).
        longest_extra: the longest extra length requests may ask for.
    """

    def __init__(
        self, model, tokenizer, search=SearchSettings(), constraint=None, jit_compile=False
    ):
        super().__init__(name="translation")
        self.model = model
        self.tokenizer = tokenizer  # a tf.Module: its subword model becomes an asset
        self.default_search = search
        self.constraint = constraint
        self.beam_sizes = sorted({*REQUEST_BEAM_SIZES, search.beam_size})
        self.longest_extra = max(search.extra_length, SearchSettings.extra_length)
        self._jit_compile = jit_compile
        # Each id's subword, for the attention's labels: EOS as "</s>", PAD (padding) as "".
        pieces = tokenizer.pieces(range(tokenizer.vocab_size))
        pieces[EOS_ID], pieces[PAD_ID] = "</s>", ""
        self._pieces = tf.constant(pieces)
        if jit_compile:  # one program serves every extra length up to the longest
            search = n_best_search(model, constraint, self.longest_extra)
            self._n_best = tf.function(search, jit_compile=True)
        else:
            self._n_best = n_best_search(model, constraint, compact=True)

    def source_ids(self, text):
        """Strings → padded source ids, truncated to the model's length, EOS-terminated."""
        return self.eos_terminated(self.tokenizer.tokenize(text))

    def eos_terminated(self, ids):
        """Ragged ids `[batch, (length)]` → padded ids, cut to leave room for EOS in the model's
        length, EOS-terminated."""
        ids = ids[:, : self.model.config.max_length - 1]
        eos = tf.fill([ids.nrows(), 1], EOS_ID)
        return tf.concat([ids, tf.RaggedTensor.from_tensor(eos)], axis=1).to_tensor(PAD_ID)

    def search(
        self, source_ids, beam_size, alpha, extra_length, exact_hypotheses=None
    ) -> BeamSearchResult:
        """The n-best hypotheses of source ids for a checked request search (with
        `exact_hypotheses`, only that many of the best are sure to be the full search's) and
        the export's minimum length and length penalty's form."""
        min_length, penalty = self.default_search.min_length, self.default_search.penalty
        if not self._jit_compile:
            return self._n_best(
                source_ids, beam_size, alpha, extra_length, exact_hypotheses, min_length, penalty
            )
        # XLA compiles once per source shape and beam size (a Python int per branch; one
        # program serves every request, so it searches every hypothesis exactly): padding
        # the width and the batch to buckets bounds the shapes. The outputs are cut back to the
        # request's rows and to the unpadded width's budget (§6.1's limits count non-PAD ids,
        # so the columns cut are PAD): the same as without XLA.
        alpha = tf.convert_to_tensor(alpha, tf.float32)
        extra_length = tf.convert_to_tensor(extra_length, tf.int32)
        max_length = self.model.config.max_length
        batch, width = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
        padded = pad_rows_to_bucket(pad_width_to_bucket(source_ids, LENGTH_BUCKET, max_length))
        branches = [
            functools.partial(
                self._n_best,
                padded,
                beam,
                alpha,
                extra_length,
                min_length=min_length,
                penalty=penalty,
            )
            for beam in self.beam_sizes
        ]
        which = tf.argmax(
            tf.cast(tf.equal(beam_size, self.beam_sizes), tf.int32), output_type=tf.int32
        )
        result = tf.switch_case(which, branches)
        out = tf.minimum(width + extra_length, max_length)
        return BeamSearchResult(
            result.ids[:batch, :, :out], *(tensor[:batch] for tensor in result[1:])
        )

    def translate(self, text, beam_size, alpha, extra_length, n_best=False):
        """The best translation of each string and its score; with `n_best`, every hypothesis
        kept, with its score and log-probability, too."""
        exact = None if n_best else 1
        result = self.search(self.source_ids(text), beam_size, alpha, extra_length, exact)
        target_ids, scores = best_of(result, beam_size)
        outputs = {"translations": self.tokenizer.detokenize(target_ids), "scores": scores}
        if n_best:
            shape = tf.shape(result.ids)
            texts = self.tokenizer.detokenize(tf.reshape(result.ids, [-1, shape[2]]))
            outputs["n_best_translations"] = tf.reshape(texts, shape[:2])
            outputs["n_best_scores"] = result.scores
            outputs["n_best_log_probs"] = result.log_probs
        return outputs

    def checked(self, beam_size, alpha, extra_length):
        return checked_request_search(
            beam_size, alpha, extra_length, self.beam_sizes, self.longest_extra
        )

    @tf.function(input_signature=[TEXT])
    def serve_text(self, text):
        search = self.default_search
        return self.translate(text, search.beam_size, search.alpha, search.extra_length)

    @tf.function(input_signature=[TEXT, BEAM, ALPHA_SPEC, EXTRA])
    def serve_text_options(self, text, beam_size, alpha, extra_length):
        beam_size, alpha, extra_length = self.checked(beam_size, alpha, extra_length)
        return self.translate(text, beam_size, alpha, extra_length, n_best=True)

    @tf.function(input_signature=[SOURCE_IDS, BEAM, ALPHA_SPEC, EXTRA])
    def serve_ids(self, source_ids, beam_size, alpha, extra_length):
        beam_size, alpha, extra_length = self.checked(beam_size, alpha, extra_length)
        source_ids = checked_width(source_ids, self.model.config.max_length)
        result = self.search(source_ids, beam_size, alpha, extra_length, exact_hypotheses=1)
        target_ids, scores = best_of(result, beam_size)
        return {"target_ids": target_ids, "scores": scores}

    @tf.function(input_signature=[TEXT, TRANSLATION])
    def serve_attention(self, text, translation):
        source_ids = self.source_ids(text)
        target_ids = self.eos_terminated(self.tokenizer.tokenize_target(translation))
        encoder, cross = attention_weights(self.model, source_ids, target_ids)
        return {
            "source_pieces": tf.gather(self._pieces, source_ids),
            "target_pieces": tf.gather(self._pieces, target_ids),
            "encoder_decoder_attention": cross,
            "encoder_self_attention": encoder,
        }

    @tf.function(input_signature=[TEXT])
    def serve_source_lengths(self, text):
        lengths = self.tokenizer.tokenize(text).row_lengths() + 1  # EOS
        return {"source_lengths": tf.cast(lengths, tf.int32)}

    def signatures(self):
        return {
            "serving_default": self.serve_text,
            "translate_options": self.serve_text_options,
            "translate_ids": self.serve_ids,
            "attention": self.serve_attention,
            "source_lengths": self.serve_source_lengths,
        }


def pad_width_to_bucket(source_ids, bucket, limit):
    """Source ids `[batch, width]` with PAD columns up to `translator.bucketed_width(width,
    bucket, limit)`: `translator.pad_to_bucket` in the graph."""
    width = tf.shape(source_ids)[1]
    rounded = -(-width // bucket) * bucket
    target = tf.maximum(tf.minimum(rounded, limit), width)
    return tf.pad(source_ids, [[0, 0], [0, target - width]], constant_values=PAD_ID)


# The widest source a warm-up compiles for: room for Multi30k's sentences. Wider requests compile
# when they first come.
WARMUP_MAX_WIDTH = 64


def warmup_requests(model_name, max_length, search, batch_sizes=(1,)) -> list:
    """TensorFlow Serving warm-up records (`PredictionLog`s) for an export with XLA: a
    `translate_ids` request with `search` per padded source width up to `WARMUP_MAX_WIDTH` and
    batch size in `batch_sizes`, each compiling the search that `serving_default` shares (for
    the size's row bucket), then one `serving_default` request."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    def record(signature_name, inputs):
        request = predict_pb2.PredictRequest(
            model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name)
        )
        for name, value in inputs.items():
            request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
        return prediction_log_pb2.PredictionLog(
            predict_log=prediction_log_pb2.PredictLog(request=request)
        )

    # Every width `pad_width_to_bucket` gives a request up to the widest warmed up.
    widest = min(WARMUP_MAX_WIDTH, max_length)
    widths = sorted({bucketed_width(n, LENGTH_BUCKET, max_length) for n in range(1, widest + 1)})
    records = [
        record(
            "translate_ids",
            {
                # Any ids do (here unknown words): XLA compiles for the shape.
                "source_ids": tf.constant([[UNK_ID] * (width - 1) + [EOS_ID]] * rows, tf.int32),
                "beam_size": tf.constant(search.beam_size, tf.int32),
                "alpha": tf.constant(search.alpha, tf.float32),
                "extra_length": tf.constant(search.extra_length, tf.int32),
            },
        )
        for rows in batch_sizes
        for width in widths
    ]
    return records + [record("serving_default", {"text": tf.constant(["Warm-up."])})]


def export_saved_model(
    translator,
    base,
    search=None,
    jit_compile=False,
    warmup_batch_sizes=(1,),
    languages=(None, None),
) -> Path:
    """Writes `translator` (a `Translator`) as the next version under `base`; returns its path.

    `search`, a `SearchSettings`, is `serving_default`'s; default: the translator's (§6.1's, or
    an imported run's own).
    `languages`: the (source, target) codes the version records in `MODEL_INFO` (None: unknown).
    `jit_compile`: compile the signatures' search with XLA (see the module docstring), and write
    warm-up requests (`WARMUP_REQUESTS`) that compile it for the common source widths at load,
    for requests of each of `warmup_batch_sizes` sentences (a server's batch sizes, from TF
    Serving's `allowed_batch_sizes`, say; each costs a compilation a width at load).
    """
    search = search or translator.search

    def write(staging):
        _write_saved_model(translator, staging, search, jit_compile, warmup_batch_sizes)
        write_model_info(staging, model_info(translator, languages, search))

    return write_next_version(base, write)


def _write_saved_model(translator, staging, search, jit_compile, warmup_batch_sizes):
    module = TranslationModule(
        translator.model, translator.tokenizer, search, translator.constraint, jit_compile
    )
    tf.saved_model.save(module, str(staging), signatures=module.signatures())
    if jit_compile:
        requests = warmup_requests(
            staging.parent.name,
            translator.model.config.max_length,
            module.default_search,
            warmup_batch_sizes,
        )
        (staging / WARMUP_REQUESTS).parent.mkdir(exist_ok=True)
        with tf.io.TFRecordWriter(str(staging / WARMUP_REQUESTS)) as writer:
            for request in requests:
                writer.write(request.SerializeToString())
