"""Parameter counts from the formulas of §3, checked against Table 3's "params ×10^6" column.

Per layer, with h heads of widths d_k, d_v and all projections biased:
    multi-head attention  2·(d_model·h·d_k + h·d_k)      (W^Q, W^K and biases)
                          + d_model·h·d_v + h·d_v         (W^V)
                          + h·d_v·d_model + d_model       (W^O)
    feed-forward (Eq. 2)  d_model·d_ff + d_ff + d_ff·d_model + d_model
    layer norm            2·d_model (gain and bias), one per sub-layer
An encoder layer has one attention, a decoder layer two; the shared embedding adds V·d_model
(§3.4), untied or unshared matrices add theirs, learned positions add max_length·d_model twice.
"""

from keras_transformer.config import PRESETS, TABLE3_PAPER, TransformerConfig


def attention_parameters(config: TransformerConfig) -> int:
    d, h = config.d_model, config.num_heads
    query_and_key = 2 * (d * h * config.d_k + h * config.d_k)
    value = d * h * config.d_v + h * config.d_v
    output = h * config.d_v * d + d
    return query_and_key + value + output


def feed_forward_parameters(config: TransformerConfig) -> int:
    return 2 * config.d_model * config.d_ff + config.d_ff + config.d_model


def encoder_layer_parameters(config: TransformerConfig) -> int:
    return attention_parameters(config) + feed_forward_parameters(config) + 2 * 2 * config.d_model


def decoder_layer_parameters(config: TransformerConfig) -> int:
    return encoder_layer_parameters(config) + attention_parameters(config) + 2 * config.d_model


def embedding_parameters(config: TransformerConfig) -> int:
    d = config.d_model
    total = config.vocab_size * d
    if not config.shared_vocabulary:
        total += config.target_vocab_size * d
    if not config.tie_embeddings:
        total += config.output_vocab_size * d
    if config.positional_encoding == "learned":
        total += 2 * config.max_length * d
    return total


def count_parameters(config: TransformerConfig) -> int:
    """Exact number of trainable parameters of `Transformer(config)`."""
    layers = config.num_layers * (
        encoder_layer_parameters(config) + decoder_layer_parameters(config)
    )
    return embedding_parameters(config) + layers


def table3_rows(vocab_size: int = 37000):
    """(preset, our count, paper's count or None) for base, every Table 3 row and big."""
    for name, (_, _, paper_millions) in TABLE3_PAPER.items():
        config = PRESETS[name].replace(vocab_size=vocab_size)
        yield name, count_parameters(config), paper_millions


def format_table3(vocab_size: int = 37000) -> str:
    """Markdown table of our parameter counts beside Table 3's column."""
    lines = [
        "| preset | N | d_model | d_ff | h | d_k | d_v "
        f"| ours (M, V={vocab_size}) | paper (M) | diff |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, ours, paper in table3_rows(vocab_size):
        c = PRESETS[name]
        diff = f"{100 * (ours / 1e6 - paper) / paper:+.1f}%" if paper else "(blank: as base)"
        lines.append(
            f"| {name} | {c.num_layers} | {c.d_model} | {c.d_ff} | {c.num_heads} | {c.d_k} | "
            f"{c.d_v} | {ours / 1e6:.1f} | {paper if paper else '-'} | {diff} |"
        )
    return "\n".join(lines)
