"""Attention heads as heat maps, like the paper's Figures 3-5.

For one sentence and its translation, draws every head of one layer's encoder self-attention
(source × source) and encoder-decoder attention (target × source), each row a query and each
column a key, labelled with the subword pieces.
"""

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or assumed

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

from keras_transformer.decoding.forced import recording  # noqa: E402
from pipelines.tokenizer import BOS_ID, EOS_ID  # noqa: E402


def attention_maps(model, source_ids, target_in_ids, layer=-1):
    """Weights `[heads, q, k]` of the encoder self-attention and the encoder-decoder attention
    of encoder/decoder layer `layer`, from one eager forward pass of one sentence pair."""
    recorded = (
        model.encoder_layers[layer].self_attention,
        model.decoder_layers[layer].cross_attention,
    )
    with recording(recorded):
        model((source_ids[None, :], target_in_ids[None, :]), training=False)
        return tuple(ops.convert_to_numpy(a.last_attention_weights)[0] for a in recorded)


def _draw(axes, weights, rows, columns, title):
    axes.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_title(title, fontsize=9)
    axes.set_xticks(range(len(columns)), columns, rotation=90, fontsize=7)
    axes.set_yticks(range(len(rows)), rows, fontsize=7)


def plot_attention(translator, sentence, layer, output_path) -> str:
    """Translates `sentence` (beam 4), draws layer `layer`'s heads to `output_path` (PNG), and
    returns the translation."""
    model, tokenizer = translator.model, translator.tokenizer
    source = np.array(translator.encode_sentences([sentence])[0], np.int32)
    target, _ = translator.decode_ids(source[None, :])
    target = [int(t) for t in ops.convert_to_numpy(target)[0] if t != 0]
    target_in = np.array([BOS_ID, *[t for t in target if t != EOS_ID]], np.int32)
    encoder_weights, cross_weights = attention_maps(model, source, target_in, layer)

    source_pieces = tokenizer.pieces(source)
    target_pieces = tokenizer.pieces(target_in[1:]) + ["</s>"]
    heads = encoder_weights.shape[0]
    figure, axes = plt.subplots(
        2, heads, figsize=(3.2 * heads, 7), squeeze=False, constrained_layout=True
    )
    layer_name = layer if layer >= 0 else len(model.encoder_layers) + layer
    for head in range(heads):
        _draw(
            axes[0, head],
            encoder_weights[head],
            source_pieces,
            source_pieces,
            f"encoder self-attention, layer {layer_name}, head {head}",
        )
        _draw(
            axes[1, head],
            cross_weights[head][: len(target_pieces)],
            target_pieces,
            source_pieces,
            f"encoder-decoder attention, layer {layer_name}, head {head}",
        )
    translation = tokenizer.detokenize(np.array([target], np.int32)).numpy()[0].decode("utf-8")
    figure.suptitle(f"{sentence}\n→ {translation}", fontsize=10)
    figure.savefig(output_path, dpi=110)
    plt.close(figure)
    return translation
