"""CTranslate2 export: a trained Transformer as a CTranslate2 model directory.

CTranslate2 (OpenNMT) is the inference engine MT users deploy for fast CPU and GPU decoding. Its
converters read OpenNMT, fairseq, Marian and Hugging Face models, not Keras ones, so
`export_ctranslate2` fills its `TransformerSpec` from our weights directly and lets CTranslate2's
own `Converter` validate, quantize and save it:

    <output>/model.bin, config.json, shared_vocabulary.json, and the tokenizer's files:
    subwords.model, or an imported Marian model's source.spm and target.spm

Our architecture maps onto the spec term for term:

- post-norm residuals, LayerNorm(x + Sublayer(x)) (`pre_norm=False`), each layer norm's ε
  written as `layer_norm_epsilon` in config.json;
- the embeddings, scaled by √d_model (the spec's `scale_embeddings`), and the tied pre-softmax
  projection: one matrix, which CTranslate2 stores once and aliases;
- the positional encodings written out as a table of `max_length` rows, in either of our
  layouts (`sinusoid_layout`): CTranslate2's built-in sinusoids lie in halves, as Marian's do,
  but space their frequencies as tensor2tensor does (10000^(i / (d_model/2 - 1))), unlike §3.5
  and Marian (10000^(2i / d_model)), so its own are never used; a learned table (Table 3 row E)
  goes in as it is. A position past `max_length` is an error in CTranslate2, as it is past our
  cache;
- Q, K and V of each head, `[d_model, h, d_k]`, as rows of one linear layer `[h·d_k, d_model]`
  (fused QKV for self-attention, Q and fused KV for encoder-decoder attention), and W^O;
- the feed-forward network's two biased linear layers with its activation (`ffn_activation`:
  Eq. 2's ReLU, swish or GELU, each one of CTranslate2's);
- the projection's bias: our output bias (`output_bias`, 0 without one), and
  `NEVER_GENERATED_LOGIT` on PAD and BOS: our searches never generate them
  (`search.NEVER_GENERATED`), and with that bias neither does CTranslate2. It then leaves them
  out of its log-softmax, as it does any token it bans, where our searches mask them after the
  log-softmax over the full vocabulary: its scores exceed ours by the probability they held;
- the vocabulary, the tokenizer's pieces in id order, with its special pieces as `<unk>`,
  `<s>` (also the decoder's start), `</s>`; `add_source_eos` appends EOS to a source, so a
  caller passes the tokenizer's pieces alone. The subword model is copied beside.

An imported Marian (OPUS-MT) model is exported as CTranslate2's own converter (its
`MarianMTLoader`) exports the original, so that code written for one runs the other: Marian's
vocabulary order (the run's `vocab.json`) without our PAD row, which Marian lacks, nor Marian's
`<pad>` (our BOS, a zero row): the decoder starts from a zero embedding
(`start_from_zero_embedding`) with `</s>` as its nominal start token; `</s>` and `<unk>` as
Marian names them; sources passed with their `</s>`, as Marian's tokenizer gives them; both
SentencePiece models copied beside.

A configuration the spec cannot hold exactly is refused, naming why (`CTranslate2ExportError`).
Settings of training alone (dropouts, label smoothing, the schedule, initializers) do not matter.
Which of CTranslate2's decoding options reproduce our `Translator`, and where its beam search
differs from ours, is in docs/CTRANSLATE2.md.

Example (needs a trained run, so not run as a doctest)::

    export_ctranslate2(load_run("runs/m30k-ende"), "ct2/m30k-ende", quantization="int8")
"""

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
from ctranslate2.converters import utils as converter_utils
from ctranslate2.converters.converter import Converter
from ctranslate2.specs import common_spec, transformer_spec
from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

from keras_transformer.config import ConfigError
from keras_transformer.decoding.search import NEVER_GENERATED
from keras_transformer.model import Transformer
from keras_transformer.run_directory import MARIAN_VOCABULARY_JSON
from pipelines.marian_tokenizer import SOURCE_MODEL, TARGET_MODEL
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

# The output bias of tokens never generated: exp() of any logit this far down is 0 in float32
# and float16 alike, and the value itself is finite in float16 (a quantized model keeps it).
NEVER_GENERATED_LOGIT = -1e4


# The feed-forward activations (`TransformerConfig.ffn_activation`) as CTranslate2 names them;
# Keras's "gelu" is the exact, erf-based one, as CTranslate2's GELU.
ACTIVATIONS = {
    "relu": common_spec.Activation.RELU,
    "swish": common_spec.Activation.SWISH,
    "gelu": common_spec.Activation.GELU,
}


class CTranslate2ExportError(ConfigError):
    """The model, or the export asked for, has no exact CTranslate2 form; the message says why."""


def export_ctranslate2(translator, output, quantization=None) -> Path:
    """Writes `translator`'s model as a CTranslate2 model directory `output`; returns its path.

    Args:
        translator: a `Translator` of one `Transformer` (no ensemble, no output constraint).
        output: the new directory; an existing one is never overwritten.
        quantization: CTranslate2's weight type (`int8`, `int8_float32`, `float16`, ...);
            `None` keeps float32.

    The directory is written beside `output` first and renamed into place, so a failed export
    leaves nothing behind.
    """
    output = Path(output)
    _check_exportable(translator, output, quantization)
    staging = output.parent / f".{output.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    KerasTransformerConverter(translator.model, translator.tokenizer).convert(
        str(staging), quantization=quantization
    )
    os.rename(staging, output)
    logger.info("wrote %s (%s)", output, quantization or "float32")
    return output


class KerasTransformerConverter(Converter):
    """CTranslate2's `Converter` for a `Transformer` and its tokenizer (see the module doc)."""

    def __init__(self, model: Transformer, tokenizer):
        self.model = model
        self.tokenizer = tokenizer

    def _load(self):
        config = self.model.config
        check_representable(config)
        pieces = self.tokenizer.pieces(range(self.tokenizer.vocab_size))
        for field in ("vocab_size", "output_vocab_size"):
            if getattr(config, field) != len(pieces):
                raise CTranslate2ExportError(
                    f"{field}={getattr(config, field)} but {self.tokenizer.path} has "
                    f"{len(pieces)} pieces: CTranslate2 needs a vocabulary of each side's size"
                )
        spec = transformer_spec.TransformerSpec.from_config(
            config.num_layers,
            config.num_heads,
            pre_norm=False,
            activation=ACTIVATIONS[config.ffn_activation],
        )
        spec.config.layer_norm_epsilon = config.layer_norm_epsilon
        if self.tokenizer.kind == "marian":
            self._set_marian_vocabulary(spec, pieces)
        else:
            self.ids = list(range(len(pieces)))
            spec.config.unk_token = pieces[UNK_ID]
            spec.config.bos_token = spec.config.decoder_start_token = pieces[BOS_ID]
            spec.config.eos_token = pieces[EOS_ID]
            spec.config.add_source_eos = True
            spec.register_file(str(self.tokenizer.path))
        vocabulary = [pieces[i] for i in self.ids]
        spec.register_source_vocabulary(vocabulary)
        spec.register_target_vocabulary(vocabulary)
        self._set_encoder(spec.encoder)
        self._set_decoder(spec.decoder)
        return spec

    def _set_marian_vocabulary(self, spec, pieces):
        """An imported Marian model's vocabulary and special tokens as CTranslate2's own Marian
        converter sets them: Marian's order (`vocab.json`) without our PAD, a row Marian lacks,
        nor Marian's `<pad>` (our BOS): the decoder starts from a zero embedding instead
        (`start_from_zero_embedding`), its start token then any (`</s>`). Sources end with
        `</s>` as Marian's tokenizer gives them (`add_source_eos` stays off). Should our BOS row
        no longer be zero (a fine-tuned model), it stays as the decoder's start token."""
        bos_row = _numpy(self.model.target_embedding.embeddings)[BOS_ID]
        starts_from_zero = not bos_row.any()
        self.ids = [
            i
            for i in marian_order(self.tokenizer, pieces)
            if i != PAD_ID and not (starts_from_zero and i == BOS_ID)
        ]
        spec.decoder.start_from_zero_embedding = starts_from_zero
        spec.config.unk_token = pieces[UNK_ID]
        spec.config.eos_token = pieces[EOS_ID]
        spec.config.decoder_start_token = pieces[EOS_ID if starts_from_zero else BOS_ID]
        for name in (SOURCE_MODEL, TARGET_MODEL):
            spec.register_file(str(self.tokenizer.path.parent / name))

    def _set_encoder(self, spec):
        model = self.model
        spec.embeddings[0].weight = _numpy(model.source_embedding.embeddings)[self.ids]
        spec.position_encodings.encodings = _position_table(model.source_positions, model.config)
        for layer_spec, layer in zip(spec.layer, model.encoder_layers, strict=True):
            _set_attention(layer_spec.self_attention, layer.self_attention, fused=[[0, 1, 2]])
            _set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attention_norm)
            _set_feed_forward(layer_spec.ffn, layer)

    def _set_decoder(self, spec):
        model = self.model
        embeddings = _numpy(model.target_embedding.embeddings)[self.ids]
        spec.embeddings.weight = embeddings
        spec.position_encodings.encodings = _position_table(model.target_positions, model.config)
        for layer_spec, layer in zip(spec.layer, model.decoder_layers, strict=True):
            _set_attention(layer_spec.self_attention, layer.self_attention, fused=[[0, 1, 2]])
            _set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attention_norm)
            _set_attention(layer_spec.attention, layer.cross_attention, fused=[[0], [1, 2]])
            _set_layer_norm(layer_spec.attention.layer_norm, layer.cross_attention_norm)
            _set_feed_forward(layer_spec.ffn, layer)
        projection = model.output_projection
        spec.projection.weight = (
            embeddings if projection is None else _numpy(projection.kernel).transpose()[self.ids]
        )
        bias = _output_bias(model)[self.ids]
        bias[np.isin(self.ids, list(NEVER_GENERATED))] = NEVER_GENERATED_LOGIT
        spec.projection.bias = bias


def marian_order(tokenizer, pieces) -> list[int]:
    """Our ids of an imported Marian model's pieces, in Marian's id order (its `vocab.json`,
    which the run keeps beside our `vocabulary.txt`)."""
    path = tokenizer.path.parent / MARIAN_VOCABULARY_JSON
    if not path.is_file():
        raise CTranslate2ExportError(
            f"{path} not found: CTranslate2 numbers an imported Marian model's pieces in "
            "Marian's order, which the run's vocab.json holds; import the checkpoint again"
        )
    marian = json.loads(path.read_text(encoding="utf-8"))
    ours = {piece: i for i, piece in enumerate(pieces)}
    missing = [piece for piece in marian if piece not in ours]
    if missing:
        raise CTranslate2ExportError(
            f"{path} holds pieces {missing[:5]} that {tokenizer.path} lacks: "
            "the run's two vocabularies do not match"
        )
    return [ours[piece] for piece, _ in sorted(marian.items(), key=lambda item: item[1])]


def _output_bias(model) -> np.ndarray:
    """The model's output bias (`output_bias`: the tied embedding's or the untied projection's),
    zeros without one."""
    projection = model.output_projection
    bias = model.target_embedding.logits_bias if projection is None else projection.bias
    if bias is None:
        return np.zeros(model.config.output_vocab_size, np.float32)
    return _numpy(bias)


def check_representable(config):
    """Raises `CTranslate2ExportError` for a configuration the spec cannot hold exactly.

    Every other field of `TransformerConfig` either maps onto the spec (sizes, ε, positional
    encoding, tied or untied projection) or only matters in training.
    """
    if config.d_k != config.d_v:
        raise CTranslate2ExportError(
            f"d_k={config.d_k} and d_v={config.d_v} differ: CTranslate2 has one width per head "
            "for queries, keys and values"
        )
    if config.d_k * config.num_heads != config.d_model:
        raise CTranslate2ExportError(
            f"d_k={config.d_k} × num_heads={config.num_heads} is not d_model={config.d_model}: "
            "CTranslate2's encoder-decoder Transformer takes its head width as d_model / h"
        )


def _check_exportable(translator, output: Path, quantization):
    if not isinstance(translator.model, Transformer):
        raise CTranslate2ExportError(
            "CTranslate2 runs one model, not an ensemble: export the members one by one"
        )
    if translator.constraint is not None:
        raise CTranslate2ExportError(
            "CTranslate2 cannot constrain its outputs to well-formed trees (well_formed_trees)"
        )
    if quantization is not None and quantization not in ACCEPTED_MODEL_TYPES:
        raise CTranslate2ExportError(
            f"quantization {quantization!r} is not one of CTranslate2's: "
            + ", ".join(ACCEPTED_MODEL_TYPES)
        )
    if output.exists():
        raise CTranslate2ExportError(
            f"{output} already exists: an export never overwrites, give a new --output"
        )


def _numpy(variable) -> np.ndarray:
    return np.asarray(variable.numpy(), np.float32)


def _position_table(positions, config) -> np.ndarray:
    """`[max_length, d_model]`: the encoding our layer adds at positions 0 .. max_length - 1."""
    if config.positional_encoding == "learned":
        return _numpy(positions.position_embeddings)
    zeros = np.zeros((1, config.max_length, config.d_model), np.float32)
    return np.asarray(positions.encoding(zeros), np.float32)


def _head_projection(dense) -> common_spec.LinearSpec:
    """A `HeadProjection` (kernel `[d_model, h, depth]`, bias `[h, depth]`) as one linear
    layer `[h·depth, d_model]`, heads in order, as CTranslate2 splits its output into heads."""
    kernel = _numpy(dense.kernel)
    spec = common_spec.LinearSpec()
    spec.weight = kernel.reshape(kernel.shape[0], -1).transpose()
    spec.bias = _numpy(dense.bias).ravel()
    return spec


def _set_attention(spec, attention, fused):
    """Fills CTranslate2's attention layers: Q, K, V (0, 1, 2) grouped into its first linear
    layers as `fused` says, and W^O (kernel `[h, d_v, d_model]`) into its last."""
    projections = [
        _head_projection(dense)
        for dense in (attention.query_dense, attention.key_dense, attention.value_dense)
    ]
    for linear_spec, group in zip(spec.linear, fused, strict=False):
        converter_utils.fuse_linear(linear_spec, [projections[i] for i in group])
    output = attention.output_dense
    d_model = output.kernel.shape[-1]
    spec.linear[-1].weight = _numpy(output.kernel).reshape(-1, d_model).transpose()
    spec.linear[-1].bias = _numpy(output.bias)


def _set_feed_forward(spec, layer):
    for linear_spec, dense in zip(
        (spec.linear_0, spec.linear_1),
        (layer.feed_forward.inner, layer.feed_forward.outer),
        strict=True,
    ):
        linear_spec.weight = _numpy(dense.kernel).transpose()
        linear_spec.bias = _numpy(dense.bias)
    _set_layer_norm(spec.layer_norm, layer.feed_forward_norm)


def _set_layer_norm(spec, add_and_norm):
    spec.gamma = _numpy(add_and_norm.layer_norm.gamma)
    spec.beta = _numpy(add_and_norm.layer_norm.beta)
