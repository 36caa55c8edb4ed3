"""A Hugging Face Marian (OPUS-MT) checkpoint, mapped onto this package's Transformer.

A checkpoint directory as the Helsinki-NLP repositories hold it: `config.json` (transformers'
`MarianConfig`), `model.safetensors` or `pytorch_model.bin`, `source.spm` and `target.spm` (the
two SentencePiece models), `vocab.json` (the one vocabulary both index: piece → id),
`tokenizer_config.json` (language codes and special tokens) and `generation_config.json` (how
transformers' `generate()` decodes it: `generation_config`).

OPUS-MT's architecture is the paper's: post-norm residuals, sinusoidal positions, embeddings
×√d_model, one embedding shared by the encoder, the decoder and the pre-softmax projection. What
varies between models is read from config.json (`transformer_config`), and a setting our
`TransformerConfig` cannot represent exactly is refused with `UnsupportedCheckpointError`
naming it. The mapping, term by term (docs/PRETRAINED.md):

    d_model, encoder_layers, encoder_attention_heads, encoder_ffn_dim    d_model, num_layers,
                                                                         num_heads, d_ff
    activation_function swish | silu | relu | gelu                       ffn_activation
    dropout, attention_dropout, activation_dropout                       residual_dropout,
                                                                         attention_dropout,
                                                                         relu_dropout
    max_position_embeddings                                              max_length
    sinusoids [sin | cos]                                                sinusoid_layout "halves"
    LayerNorm ε (transformers' nn.LayerNorm: 1e-5)                       layer_norm_epsilon
    tie_word_embeddings                                                  tie_embeddings
    final_logits_bias                                                    output_bias

Ids: this package reserves PAD 0, BOS 1, EOS 2, UNK 3, where Marian numbers `</s>`, `<unk>` and
`<pad>` as its vocabulary has them, and starts decoding from the `<pad>` row (a zero embedding).
`vocabulary_order` puts a new PAD row first (a zero embedding, and an output bias of
`NEW_PAD_LOGIT`: the checkpoint's softmax has no such token), then Marian's `<pad>` (our BOS:
decoding starts from it, as Marian's does), `</s>` (EOS), `<unk>` (UNK), then every other piece in
Marian's order; the embedding rows and the output bias are permuted to match. The weights
(`assign_weights`): torch's `Linear` holds `[out, in]`, transposed into our kernels; q/k/v
projections split their `out` axis into `[heads, depth]`, as transformers' attention does, and
the output projection its `in` axis. transformers scales queries by depth^-1/2 after the
projection; our attention divides Q·Kᵀ by √d_k: the same.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from keras_transformer.config import TransformerConfig, read_json_file
from keras_transformer.errors import KerasTransformerError
from keras_transformer.pretrained.generation_config import (
    GENERATION_CONFIG_FILE,
    model_config_generation,
)
from keras_transformer.pretrained.tensor_files import CheckpointTensors, read_tensors
from keras_transformer.run_directory import CheckpointError

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"
# Preferred first: safetensors is read without unpickling anything.
WEIGHTS_FILES = ("model.safetensors", "pytorch_model.bin")
CHECKPOINT_FILES = (
    CONFIG_FILE,
    VOCAB_FILE,
    TOKENIZER_CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    SOURCE_SPM,
    TARGET_SPM,
)

# transformers' Marian layers are torch's `nn.LayerNorm` with its default ε; MarianConfig has
# no setting for it.
TRANSFORMERS_LAYER_NORM_EPSILON = 1e-5
# transformers' activation names → `TransformerConfig.ffn_activation`. ("gelu" is the exact,
# erf-based GELU in both; transformers' tanh approximations are other names, refused.)
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
# The text of the PAD row the import adds; no Marian vocabulary holds it.
NEW_PAD_PIECE = "<keras_transformer:pad>"
# The output bias of that row: the checkpoint's softmax has no such token, so its probability
# must be 0 for our log-softmax over the full vocabulary to be the checkpoint's. exp() of a logit
# this far down is 0 in float32 and float16, and the value is finite in float16.
NEW_PAD_LOGIT = -1e4
# MarianConfig's defaults for settings a config.json may leave out (transformers reads them so).
MARIAN_DEFAULTS = {
    "scale_embedding": False,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    # Keys of older configs that transformers no longer reads: what its Marian always does.
    "normalize_before": False,
    "normalize_embedding": False,
    "static_position_embeddings": True,
    "add_final_layer_norm": False,
}


class UnsupportedCheckpointError(KerasTransformerError, ValueError):
    """A checkpoint setting that `TransformerConfig` cannot represent exactly; the message names
    the setting, its value and the file."""


class MarianCheckpoint:
    """The files of a Hugging Face Marian checkpoint directory, read and checked.

    Attributes:
        directory: the checkpoint directory.
        config_path: the file its settings come from (config.json), which errors name.
        settings: config.json.
        vocabulary: vocab.json's pieces in Marian's id order.
        tokenizer_settings: tokenizer_config.json ({} where there is none).
        generation_path: the file the generation settings come from: generation_config.json,
            else config.json.
        generation: its generation settings (`generation_config.model_config_generation` of
            config.json where there is no generation_config.json).
        weights_path: model.safetensors, else pytorch_model.bin.
        layer_norm_epsilon: ε of the layer norms, transformers' (its Marian has no setting).
    """

    layer_norm_epsilon = TRANSFORMERS_LAYER_NORM_EPSILON

    def __init__(self, directory):
        self.directory = Path(directory)
        for name in (CONFIG_FILE, VOCAB_FILE, SOURCE_SPM, TARGET_SPM):
            if not (self.directory / name).is_file():
                raise CheckpointError(
                    f"{self.directory / name} not found: {self.directory} is not a Hugging Face "
                    "Marian checkpoint directory"
                )
        self.config_path = self.directory / CONFIG_FILE
        self.settings = read_json_file(self.config_path)
        tokenizer_path = self.directory / TOKENIZER_CONFIG_FILE
        self.tokenizer_settings = read_json_file(tokenizer_path) if tokenizer_path.is_file() else {}
        self.generation_path = self.directory / GENERATION_CONFIG_FILE
        if self.generation_path.is_file():
            self.generation = read_json_file(self.generation_path)
        else:
            self.generation_path = self.config_path
            self.generation = model_config_generation(self.settings)
        self.vocabulary = _read_vocabulary(self.directory / VOCAB_FILE)
        found = [name for name in WEIGHTS_FILES if (self.directory / name).is_file()]
        if not found:
            raise CheckpointError(f"{self.directory} holds neither {' nor '.join(WEIGHTS_FILES)}")
        self.weights_path = self.directory / found[0]
        self._tensors = None

    def setting(self, name):
        """config.json's `name`, else MarianConfig's default for it; a setting with neither is
        a `CheckpointError`."""
        if name in self.settings:
            return self.settings[name]
        if name in MARIAN_DEFAULTS:
            return MARIAN_DEFAULTS[name]
        raise CheckpointError(f"{self.config_path} has no {name!r}")

    def refuse(self, name, value, why):
        raise UnsupportedCheckpointError(
            f"{self.config_path}: {name}={value!r} {why}; TransformerConfig "
            "cannot represent it exactly"
        )

    # -- languages and special tokens ---------------------------------------------------------

    @property
    def languages(self) -> tuple[str | None, str | None]:
        """tokenizer_config.json's source and target language codes (None where not given)."""
        return self.tokenizer_settings.get("source_lang"), self.tokenizer_settings.get(
            "target_lang"
        )

    def vocabulary_order(self) -> np.ndarray:
        """Marian's id of each of our ids (see the module doc), -1 for the new PAD row."""
        pad, eos = self.setting("pad_token_id"), self.setting("eos_token_id")
        unk_piece = self.tokenizer_settings.get("unk_token", "<unk>")
        if unk_piece not in self.vocabulary:
            raise CheckpointError(
                f"the vocabulary of {self.directory} lacks the unknown token {unk_piece!r}"
            )
        unk = self.vocabulary.index(unk_piece)
        for name, marian_id in (("pad_token_id", pad), ("eos_token_id", eos)):
            if not 0 <= marian_id < len(self.vocabulary):
                raise CheckpointError(
                    f"{self.config_path}: {name}={marian_id} is not in the vocabulary's "
                    f"{len(self.vocabulary)} ids"
                )
        specials = [pad, eos, unk]
        if len(set(specials)) < len(specials):
            raise CheckpointError(
                f"{self.directory}: pad ({pad}), eos ({eos}) and unknown ({unk}) ids must differ"
            )
        others = [i for i in range(len(self.vocabulary)) if i not in specials]
        return np.array([-1, *specials, *others])

    # -- the model ------------------------------------------------------------------------------

    def transformer_config(self, max_length: int | None = None) -> TransformerConfig:
        """Our `TransformerConfig` of the checkpoint, every setting read from config.json.

        `max_length` may lower `max_position_embeddings`, the longest sequence the checkpoint
        handles (our decoding cache is preallocated at it), never raise it.
        """
        self._refuse_what_we_cannot_represent()
        positions = self.setting("max_position_embeddings")
        if max_length is not None and not 0 < max_length <= positions:
            raise UnsupportedCheckpointError(
                f"max_length={max_length} must be in [1, max_position_embeddings={positions}] "
                f"of {self.config_path}"
            )
        return TransformerConfig(
            vocab_size=len(self.vocabulary) + 1,  # with the new PAD row
            num_layers=self.setting("encoder_layers"),
            d_model=self.setting("d_model"),
            d_ff=self.setting("encoder_ffn_dim"),
            num_heads=self.setting("encoder_attention_heads"),
            residual_dropout=self.setting("dropout"),
            attention_dropout=self.setting("attention_dropout"),
            relu_dropout=self.setting("activation_dropout"),
            ffn_activation=ACTIVATIONS[self.setting("activation_function")],
            positional_encoding="sinusoidal",
            sinusoid_layout="halves",
            max_length=max_length or positions,
            tie_embeddings=self.setting("tie_word_embeddings"),
            # transformers' Marian adds `final_logits_bias` always, zeros where it is missing;
            # ours also holds the new PAD row's `NEW_PAD_LOGIT`.
            output_bias=True,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )

    def _refuse_what_we_cannot_represent(self):
        for encoder, decoder in (
            ("encoder_layers", "decoder_layers"),
            ("encoder_attention_heads", "decoder_attention_heads"),
            ("encoder_ffn_dim", "decoder_ffn_dim"),
        ):
            if self.setting(encoder) != self.setting(decoder):
                self.refuse(
                    decoder,
                    self.setting(decoder),
                    f"differs from {encoder}={self.setting(encoder)}",
                )
        activation = self.setting("activation_function")
        if activation not in ACTIVATIONS:
            self.refuse("activation_function", activation, f"is none of {sorted(ACTIVATIONS)}")
        if self.setting("d_model") % self.setting("encoder_attention_heads"):
            self.refuse("d_model", self.setting("d_model"), "is not a multiple of the heads")
        vocab_size = self.setting("vocab_size")
        decoder_vocab_size = self.settings.get("decoder_vocab_size") or vocab_size
        requirements = (
            ("share_encoder_decoder_embeddings", True, "(separate source and target embeddings)"),
            ("normalize_before", False, "(pre-norm residuals)"),
            ("normalize_embedding", False, "(a layer norm on the embeddings)"),
            ("add_final_layer_norm", False, "(a layer norm after the last layer)"),
            ("static_position_embeddings", True, "(learned positions)"),
            ("scale_embedding", True, "(embeddings not scaled by √d_model)"),
        )
        for name, required, meaning in requirements:
            if self.setting(name) != required:
                self.refuse(name, self.setting(name), meaning)
        if self.tokenizer_settings.get("separate_vocabs"):
            raise UnsupportedCheckpointError(
                f"{self.directory / TOKENIZER_CONFIG_FILE}: separate_vocabs=True (a source and a "
                "target vocabulary); TransformerConfig cannot represent it exactly"
            )
        if decoder_vocab_size != vocab_size:
            self.refuse("decoder_vocab_size", decoder_vocab_size, f"differs from {vocab_size=}")
        start = self.settings.get("decoder_start_token_id", self.setting("pad_token_id"))
        if start != self.setting("pad_token_id"):
            self.refuse("decoder_start_token_id", start, "is not pad_token_id")
        if vocab_size != len(self.vocabulary):
            raise CheckpointError(
                f"{self.config_path}: vocab_size={vocab_size}, but "
                f"{self.directory / VOCAB_FILE} holds {len(self.vocabulary)} pieces"
            )

    @property
    def tensors(self) -> CheckpointTensors:
        """The weights file's tensors, named as transformers names them; read once."""
        if self._tensors is None:
            self._tensors = read_tensors(self.weights_path)
        return self._tensors


def assign_weights(model, tensors: CheckpointTensors, order: np.ndarray):
    """Sets every weight of `model` (a `Transformer` of `transformer_config`) from `tensors`,
    with the embedding rows and output bias in our id `order` (`vocabulary_order`)."""
    config = model.config
    weights = _Weights(tensors)
    embedding = weights.get(
        ("model.shared.weight", "model.encoder.embed_tokens.weight"),
        (config.vocab_size - 1, config.d_model),
    )
    _set(model.source_embedding.embeddings, _reorder(embedding, order))
    if not config.tie_embeddings:
        output = weights.get(("lm_head.weight",), (config.vocab_size - 1, config.d_model))
        _set(model.output_projection.kernel, _reorder(output, order).T)
    bias = np.zeros((1, config.vocab_size - 1), np.float32)
    if "final_logits_bias" in tensors:
        bias = weights.get(("final_logits_bias",), bias.shape)
    bias = _reorder(bias[0], order)
    bias[order < 0] = NEW_PAD_LOGIT
    tied = config.tie_embeddings
    _set(model.source_embedding.logits_bias if tied else model.output_projection.bias, bias)
    for i, layer in enumerate(model.encoder_layers):
        prefix = f"model.encoder.layers.{i}."
        _assign_attention(layer.self_attention, weights, prefix + "self_attn.", config)
        _assign_norm(layer.self_attention_norm, weights, prefix + "self_attn_layer_norm.", config)
        _assign_feed_forward(layer, weights, prefix, config)
    for i, layer in enumerate(model.decoder_layers):
        prefix = f"model.decoder.layers.{i}."
        _assign_attention(layer.self_attention, weights, prefix + "self_attn.", config)
        _assign_norm(layer.self_attention_norm, weights, prefix + "self_attn_layer_norm.", config)
        _assign_attention(layer.cross_attention, weights, prefix + "encoder_attn.", config)
        _assign_norm(
            layer.cross_attention_norm, weights, prefix + "encoder_attn_layer_norm.", config
        )
        _assign_feed_forward(layer, weights, prefix, config)


class _Weights:
    """Checked reads from a checkpoint: a tensor of another shape is an error naming it."""

    def __init__(self, tensors: CheckpointTensors):
        self.tensors = tensors

    def get(self, names, shape) -> np.ndarray:
        """The first of `names` the checkpoint holds (the first one missing is the error)."""
        name = next((n for n in names if n in self.tensors), names[0])
        tensor = self.tensors[name]
        if tensor.shape != tuple(shape):
            raise CheckpointError(
                f"{self.tensors.path}: tensor {name!r} has shape {list(tensor.shape)}, the "
                f"configuration needs {list(shape)}"
            )
        return tensor.astype(np.float32)


def _assign_attention(attention, weights: _Weights, prefix, config):
    heads, d_model = config.num_heads, config.d_model
    for projection, name, depth in (
        (attention.query_dense, "q_proj", config.d_k),
        (attention.key_dense, "k_proj", config.d_k),
        (attention.value_dense, "v_proj", config.d_v),
    ):
        kernel = weights.get((f"{prefix}{name}.weight",), (heads * depth, d_model))
        bias = weights.get((f"{prefix}{name}.bias",), (heads * depth,))
        _set(projection.kernel, kernel.T.reshape(d_model, heads, depth))
        _set(projection.bias, bias.reshape(heads, depth))
    kernel = weights.get((f"{prefix}out_proj.weight",), (d_model, heads * config.d_v))
    _set(attention.output_dense.kernel, kernel.T.reshape(heads, config.d_v, d_model))
    _set(attention.output_dense.bias, weights.get((f"{prefix}out_proj.bias",), (d_model,)))


def _assign_norm(add_and_norm, weights: _Weights, prefix, config):
    _set(add_and_norm.layer_norm.gamma, weights.get((prefix + "weight",), (config.d_model,)))
    _set(add_and_norm.layer_norm.beta, weights.get((prefix + "bias",), (config.d_model,)))


def _assign_feed_forward(layer, weights: _Weights, prefix, config):
    for dense, name, shape in (
        (layer.feed_forward.inner, "fc1", (config.d_ff, config.d_model)),
        (layer.feed_forward.outer, "fc2", (config.d_model, config.d_ff)),
    ):
        _set(dense.kernel, weights.get((f"{prefix}{name}.weight",), shape).T)
        _set(dense.bias, weights.get((f"{prefix}{name}.bias",), shape[:1]))
    _assign_norm(layer.feed_forward_norm, weights, prefix + "final_layer_norm.", config)


def _reorder(rows: np.ndarray, order: np.ndarray) -> np.ndarray:
    """`rows` (Marian's id order on axis 0) in our order; the new PAD row is zeros."""
    reordered = rows[np.maximum(order, 0)]
    reordered[order < 0] = 0.0
    return reordered


def _set(variable, value: np.ndarray):
    variable.assign(np.ascontiguousarray(value, dtype=np.float32))


def _read_vocabulary(path: Path) -> list[str]:
    """vocab.json's pieces in id order; its ids must be 0 .. n-1, each once."""
    ids = read_json_file(path)
    if not isinstance(ids, dict) or sorted(ids.values()) != list(range(len(ids))):
        raise CheckpointError(f"{path} does not map pieces to the ids 0 .. n-1, each once")
    pieces = [""] * len(ids)
    for piece, marian_id in ids.items():
        pieces[marian_id] = piece
    if NEW_PAD_PIECE in ids:
        raise CheckpointError(f"{path} already holds {NEW_PAD_PIECE!r}, the piece the import adds")
    return pieces


def vocabulary_pieces(checkpoint: MarianCheckpoint, order: np.ndarray) -> list[str]:
    """The pieces in our id order: vocabulary.txt's lines."""
    return [NEW_PAD_PIECE if i < 0 else checkpoint.vocabulary[i] for i in order]
