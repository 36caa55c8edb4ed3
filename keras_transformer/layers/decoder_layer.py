"""One layer of the decoder stack, §3.1, with a decoding cache for incremental inference.

"In addition to the two sub-layers in each encoder layer, the decoder inserts a third sub-layer,
which performs multi-head attention over the output of the encoder stack ... We also modify the
self-attention sub-layer in the decoder stack to prevent positions from attending to subsequent
positions."

Decoding one position at a time (`decode_step`) uses a cache per layer, preallocated at a fixed
length so that XLA and TFLite see the same shapes at every step, and laid out as attention
reads them (keys transposed, see `scaled_dot_product_attention`) so that no step copies them:

    self_key   [batch, heads, d_k, max_length]     written at the step index
    self_value [batch, heads, max_length, d_v]     written at the step index
    cross_key  [batch, heads, d_k, source_length]  computed once from the encoder output
    cross_value[batch, heads, source_length, d_v]  computed once from the encoder output

Beam search reorders the batch axis of `self_key`/`self_value` when beams are re-ranked; the
cross entries are identical within a sentence's beams and need no reordering.
"""

import keras
from keras import ops

from keras_transformer.layers.add_and_norm import AddAndNorm
from keras_transformer.layers.encoder_layer import EncoderLayer
from keras_transformer.layers.masks import decode_step_attention_mask
from keras_transformer.layers.multi_head_attention import MultiHeadAttention

# The cache entries that follow a hypothesis when beam search re-ranks them, each with the axis
# of its positions (of which beam search reorders those written); the cross entries are the same
# for every hypothesis of a sentence.
REORDERED_CACHE_AXES = {"self_key": 3, "self_value": 2}


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(EncoderLayer):
    """Masked self-attention, encoder-decoder attention and feed-forward, each in Add & Norm.

    Takes the same arguments as `EncoderLayer`, whose two sub-layers it extends (§3.1).

    Call arguments:
        inputs: `[batch, target_length, d_model]`.
        encoder_output: `[batch, source_length, d_model]`.
        self_attention_mask: bool, broadcastable to `[batch, heads, target_length, target_length]`.
        cross_attention_mask: bool, broadcastable to `[batch, heads, target_length, source_length]`.
        training: enables dropout.

    Returns:
        `[batch, target_length, d_model]`.

    Example:
    >>> import numpy as np
    >>> layer = DecoderLayer(num_heads=2, d_k=4, d_v=4, d_ff=16, residual_dropout=0.1)
    >>> tuple(layer(np.ones((2, 3, 8), "float32"), np.ones((2, 5, 8), "float32")).shape)
    (2, 3, 8)
    """

    def build(self, inputs_shape, encoder_output_shape=None):
        super().build(inputs_shape)
        self.cross_attention = MultiHeadAttention(
            self.num_heads,
            self.d_k,
            self.d_v,
            self.attention_dropout,
            initializer_fan=self.initializer_fan,
            name="cross_attention",
            dtype=self.dtype_policy,
        )
        self.cross_attention_norm = AddAndNorm(
            self.residual_dropout,
            self.layer_norm_epsilon,
            name="cross_attention_add_and_norm",
            dtype=self.dtype_policy,
        )
        self.cross_attention.build(inputs_shape, encoder_output_shape or inputs_shape)
        self.cross_attention_norm.build(inputs_shape)

    def call(
        self,
        inputs,
        encoder_output,
        self_attention_mask=None,
        cross_attention_mask=None,
        training=None,
    ):
        attended = self.self_attention(
            inputs, inputs, attention_mask=self_attention_mask, training=training
        )
        x = self.self_attention_norm(inputs, attended, training=training)
        cross_key, cross_value = self.cross_attention.project_key_value(encoder_output)
        return self._cross_attention_and_feed_forward(
            x, cross_key, cross_value, cross_attention_mask, training
        )

    def _cross_attention_and_feed_forward(self, x, cross_key, cross_value, mask, training):
        attended = self.cross_attention.attend(
            x, cross_key, cross_value, attention_mask=mask, training=training
        )
        x = self.cross_attention_norm(x, attended, training=training)
        return self.feed_forward_norm(x, self.feed_forward(x, training=training), training=training)

    def compute_output_shape(self, inputs_shape, encoder_output_shape=None):
        return inputs_shape

    def init_cache(self, encoder_output, max_length):
        """The cache for decoding up to `max_length` positions against `encoder_output`."""
        batch_size = ops.shape(encoder_output)[0]
        cross_key, cross_value = self.cross_attention.project_key_value(encoder_output)
        return {
            "self_key": ops.zeros(
                (batch_size, self.num_heads, self.d_k, max_length), cross_key.dtype
            ),
            "self_value": ops.zeros(
                (batch_size, self.num_heads, max_length, self.d_v), cross_value.dtype
            ),
            "cross_key": cross_key,
            "cross_value": cross_value,
        }

    def decode_step(self, inputs, step, cache, cross_attention_mask=None):
        """Runs position `step` alone, attending to the cached positions 0..step.

        Args:
            inputs: `[batch, 1, d_model]`, the embedded token at position `step`.
            step: int scalar (may be a tensor), the position being decoded.
            cache: this layer's cache from `init_cache` or the previous step.
            cross_attention_mask: bool, broadcastable to `[batch, heads, 1, source_length]`.

        Returns:
            `(outputs [batch, 1, d_model], updated cache)`; inference mode (no dropout).
        """
        key, value = self.self_attention.project_key_value(inputs)
        # Written by a select, not `ops.slice_update`: outside XLA, TensorFlow runs the latter's
        # XlaDynamicUpdateSlice by compiling it for each new shape, and a compacted search's
        # shapes change as its sentences finish.
        positions = ops.arange(ops.shape(cache["self_value"])[2])
        self_key = ops.where(positions == step, key, cache["self_key"])
        self_value = ops.where((positions == step)[:, None], value, cache["self_value"])
        mask = decode_step_attention_mask(step, ops.shape(self_key)[-1])
        attended = self.self_attention.attend(inputs, self_key, self_value, attention_mask=mask)
        x = self.self_attention_norm(inputs, attended)
        outputs = self._cross_attention_and_feed_forward(
            x, cache["cross_key"], cache["cross_value"], cross_attention_mask, training=False
        )
        return outputs, {**cache, "self_key": self_key, "self_value": self_value}
