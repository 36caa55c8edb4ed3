"""The Transformer, §3 and Figure 1: an encoder-decoder built from attention alone.

Source ids go through the shared embedding (×√d_model, §3.4), the positional encoding (§3.5) and
residual dropout (§5.4) into N encoder layers; target ids likewise into N decoder layers, which
also attend to the encoder output; the tied pre-softmax projection turns the decoder output into
logits over the target vocabulary.

Besides the full forward pass (`model((source_ids, target_in_ids))`), the model decodes one
position at a time: `encode` once, `init_cache`, then `decode_step` per position, which is what
greedy and beam search run on.
"""

import keras
from keras import ops

from keras_transformer import keras_internals
from keras_transformer.config import TransformerConfig
from keras_transformer.layers.decoder_layer import DecoderLayer
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embeddings import SharedEmbedding
from keras_transformer.layers.encoder_layer import EncoderLayer
from keras_transformer.layers.masks import (
    PAD_ID,
    decoder_self_attention_mask,
    key_padding_attention_mask,
    padding_mask,
)
from keras_transformer.layers.positional_encoding import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    Args:
        config: a `TransformerConfig` (or its dict) holding every hyperparameter.

    Call arguments:
        inputs: `(source_ids, target_in_ids)`, int `[batch, source_length]` and
            `[batch, target_length]`, padded with 0; `target_in_ids` starts with BOS.
        training: enables dropout.

    Returns:
        float32 logits `[batch, target_length, target_vocab_size]`.

    Example:
    >>> import numpy as np
    >>> model = Transformer(TransformerConfig.preset("tiny"))
    >>> tuple(model((np.array([[5, 6, 2]]), np.array([[1, 7]]))).shape)
    (1, 2, 1000)
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = (
            config if isinstance(config, TransformerConfig) else TransformerConfig.from_dict(config)
        )
        self._create_layers(self.config)
        # Every weight shape follows from the config, so build now: `encode`/`decode_step` can
        # then be used before any forward pass.
        self.build()

    def _create_layers(self, config):
        def positions(name):
            if config.positional_encoding == "learned":
                return LearnedPositionalEmbedding(config.max_length, name=name)
            return SinusoidalPositionalEncoding(config.sinusoid_layout, name=name)

        # The output bias belongs to whichever embedding is the pre-softmax projection.
        self.source_embedding = SharedEmbedding(
            config.vocab_size,
            config.d_model,
            output_bias=config.output_bias and config.tie_embeddings and config.shared_vocabulary,
            name="shared_embedding" if config.shared_vocabulary else "source_embedding",
        )
        self.target_embedding = (
            self.source_embedding
            if config.shared_vocabulary
            else SharedEmbedding(
                config.target_vocab_size,
                config.d_model,
                output_bias=config.output_bias and config.tie_embeddings,
                name="target_embedding",
            )
        )
        self.output_projection = (
            None
            if config.tie_embeddings
            else keras.layers.Dense(
                config.output_vocab_size,
                use_bias=config.output_bias,
                dtype="float32",
                name="output_projection",
            )
        )
        self.source_positions = positions("source_positions")
        self.target_positions = positions("target_positions")
        self.source_dropout = Dropout(config.residual_dropout, name="source_dropout")
        self.target_dropout = Dropout(config.residual_dropout, name="target_dropout")
        layer_args = dict(
            num_heads=config.num_heads,
            d_k=config.d_k,
            d_v=config.d_v,
            d_ff=config.d_ff,
            residual_dropout=config.residual_dropout,
            attention_dropout=config.attention_dropout,
            relu_dropout=config.relu_dropout,
            ffn_activation=config.ffn_activation,
            layer_norm_epsilon=config.layer_norm_epsilon,
            initializer_fan=config.qkv_initializer_fan,
        )
        self.encoder_layers = [
            EncoderLayer(**layer_args, name=f"encoder_layer_{i}") for i in range(config.num_layers)
        ]
        self.decoder_layers = [
            DecoderLayer(**layer_args, name=f"decoder_layer_{i}") for i in range(config.num_layers)
        ]

    def build(self, input_shape=None):
        if self.built:  # also reached from `build_from_config` when loading a saved model
            return
        hidden_shape = (None, None, self.config.d_model)
        for embedding in {
            id(e): e for e in (self.source_embedding, self.target_embedding)
        }.values():
            embedding.build()  # once: source and target share one layer by default
        for layer in (self.source_positions, self.target_positions, *self.encoder_layers):
            layer.build(hidden_shape)
        for layer in self.decoder_layers:
            layer.build(hidden_shape, hidden_shape)
        if self.output_projection is not None:
            self.output_projection.build(hidden_shape)
        self.built = True

    # -- the full forward pass ----------------------------------------------------------------

    def compile(self, *args, **kwargs):
        """`keras.Model.compile`; an XLA-compiled step draws hashed dropout masks (dropout.py)."""
        super().compile(*args, **kwargs)
        xla_tensorflow = self.jit_compile and keras.backend.backend() == "tensorflow"
        for layer in keras_internals.sublayers(self):
            if isinstance(layer, Dropout):
                layer.hashed_masks = xla_tensorflow

    def call(self, inputs, training=None):
        source_ids, target_in_ids = inputs
        encoder_output, source_mask = self.encode(source_ids, training=training)
        return self.decode(target_in_ids, encoder_output, source_mask, training=training)

    def encode(self, source_ids, training=None):
        """Source ids `[batch, S]` → encoder output `[batch, S, d_model]` and the padding mask."""
        source_mask = padding_mask(source_ids)
        x = self.source_positions(self.source_embedding(source_ids))
        x = self.source_dropout(x, training=training)
        attention_mask = key_padding_attention_mask(source_mask)
        for layer in self.encoder_layers:
            x = layer(x, attention_mask=attention_mask, training=training)
        return x, source_mask

    def decode(self, target_in_ids, encoder_output, source_mask, training=None):
        """All target positions at once (teacher forcing): float32 logits `[batch, T, vocab]`."""
        x = self.target_positions(self.target_embedding(target_in_ids))
        x = self.target_dropout(x, training=training)
        self_mask = decoder_self_attention_mask(padding_mask(target_in_ids))
        cross_mask = key_padding_attention_mask(source_mask)
        for layer in self.decoder_layers:
            x = layer(
                x,
                encoder_output,
                self_attention_mask=self_mask,
                cross_attention_mask=cross_mask,
                training=training,
            )
        return self._logits(x)

    def _logits(self, decoder_output):
        if self.output_projection is None:
            return self.target_embedding.logits(decoder_output)
        return self.output_projection(ops.cast(decoder_output, "float32"))

    # -- incremental decoding ------------------------------------------------------------------

    def init_cache(self, encoder_output, max_length):
        """Per-layer decoding caches for up to `max_length` target positions (a tuple)."""
        return tuple(layer.init_cache(encoder_output, max_length) for layer in self.decoder_layers)

    def decode_step(self, token_ids, step, cache, source_mask):
        """Decodes position `step` given the token there and the cache of earlier positions.

        Args:
            token_ids: int `[batch]`, the target token at position `step` (BOS at step 0).
            step: int scalar, may be a tensor inside a `tf.while_loop`.
            cache: from `init_cache` or the previous `decode_step`.
            source_mask: bool `[batch, source_length]` from `encode`.

        Returns:
            `(logits, cache)`: float32 logits `[batch, vocab]` for position `step + 1`'s token,
            and the cache with position `step` written. Inference mode (no dropout).
        """
        x = self.target_embedding(ops.expand_dims(token_ids, 1))
        x = self.target_positions(x, start_index=step)
        cross_mask = key_padding_attention_mask(source_mask)
        new_cache = []
        for layer, layer_cache in zip(self.decoder_layers, cache, strict=True):
            x, layer_cache = layer.decode_step(x, step, layer_cache, cross_mask)
            new_cache.append(layer_cache)
        # The one position taken before the output projection: after it, taking it would copy
        # the `[batch, vocab]` logits (a strided copy in LiteRT).
        return self._logits(x[:, 0, :]), tuple(new_cache)

    def greedy_ids(self, source_ids, start_ids, length):
        """Cached greedy decoding in `keras.ops`, on any backend: `length` positions after
        `start_ids` (int `[batch]`, BOS), each the most probable token given those before it.

        One `ops.fori_loop` over `decode_step`, every sentence for all `length` positions: the
        decoding step as `benchmarks/gpu.py` times it and the tests check it against the full
        pass. PAD is never chosen: fed back, it would be masked by the full pass but not by the
        cache. `keras_transformer.decoding` holds the searches that stop at EOS and score.

        Returns:
            int32 `[batch, length]`.
        """
        encoder_output, source_mask = self.encode(source_ids)
        cache = self.init_cache(encoder_output, length)
        batch_size = ops.shape(source_ids)[0]
        ids = ops.zeros((batch_size, length + 1), "int32")
        ids = ops.slice_update(ids, [0, 0], ops.expand_dims(ops.cast(start_ids, "int32"), 1))
        never_pad = ops.where(ops.arange(self.config.output_vocab_size) == PAD_ID, -1e9, 0.0)

        def step_fn(step, state):
            ids, cache = state
            logits, cache = self.decode_step(ops.take(ids, step, axis=1), step, cache, source_mask)
            tokens = ops.cast(ops.argmax(logits + never_pad, axis=-1), "int32")
            return ops.slice_update(ids, [0, step + 1], ops.expand_dims(tokens, 1)), cache

        ids, _ = ops.fori_loop(0, length, step_fn, (ids, cache))
        return ids[:, 1:]

    # -- serialization -------------------------------------------------------------------------

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
