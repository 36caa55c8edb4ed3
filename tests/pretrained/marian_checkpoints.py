"""Small Hugging Face Marian checkpoints written with numpy and the safetensors library, with the
tensor names and config.json keys transformers writes, for the importer's refusal and
broken-file tests (the parity tests use tests/fixtures/marian, written by transformers itself).
"""

import json

import numpy as np
from safetensors.numpy import save_file

D_MODEL, LAYERS, HEADS, FFN = 16, 2, 2, 32
# Marian's numbering of the classic models: `</s>` 0, `<unk>` 1, `<pad>` last.
PIECES = ["</s>", "<unk>", ">>deu<<", *(f"▁w{i}" for i in range(12)), "<pad>"]
PAD, EOS = len(PIECES) - 1, 0

# config.json as transformers 5 writes a classic OPUS-MT model's (opus-mt-en-de's settings).
CONFIG = {
    "model_type": "marian",
    "architectures": ["MarianMTModel"],
    "vocab_size": len(PIECES),
    "decoder_vocab_size": len(PIECES),
    "d_model": D_MODEL,
    "encoder_layers": LAYERS,
    "decoder_layers": LAYERS,
    "encoder_attention_heads": HEADS,
    "decoder_attention_heads": HEADS,
    "encoder_ffn_dim": FFN,
    "decoder_ffn_dim": FFN,
    "activation_function": "swish",
    "max_position_embeddings": 512,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "scale_embedding": True,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
    "pad_token_id": PAD,
    "eos_token_id": EOS,
    "decoder_start_token_id": PAD,
}


def marian_tensors(seed=0, tied=True) -> dict[str, np.ndarray]:
    """Random weights under transformers' `MarianMTModel` names."""
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return rng.normal(scale=0.2, size=shape).astype(np.float32)

    tensors = {"model.shared.weight": normal(len(PIECES), D_MODEL)}
    tensors["final_logits_bias"] = normal(1, len(PIECES))
    if not tied:
        tensors["lm_head.weight"] = normal(len(PIECES), D_MODEL)
    for side, blocks in (("encoder", ("self_attn",)), ("decoder", ("self_attn", "encoder_attn"))):
        for i in range(LAYERS):
            prefix = f"model.{side}.layers.{i}."
            for block in blocks:
                for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    tensors[f"{prefix}{block}.{projection}.weight"] = normal(D_MODEL, D_MODEL)
                    tensors[f"{prefix}{block}.{projection}.bias"] = normal(D_MODEL)
            for norm in (*(f"{block}_layer_norm" for block in blocks), "final_layer_norm"):
                tensors[f"{prefix}{norm}.weight"] = 1 + normal(D_MODEL)
                tensors[f"{prefix}{norm}.bias"] = normal(D_MODEL)
            tensors[f"{prefix}fc1.weight"], tensors[f"{prefix}fc1.bias"] = (
                normal(FFN, D_MODEL),
                normal(FFN),
            )
            tensors[f"{prefix}fc2.weight"], tensors[f"{prefix}fc2.bias"] = (
                normal(D_MODEL, FFN),
                normal(D_MODEL),
            )
    return tensors


def write_marian_checkpoint(directory, changes=None, tensors=None):
    """A checkpoint directory: config.json (`CONFIG` with `changes`), model.safetensors (default
    `marian_tensors()`), vocab.json, tokenizer_config.json and two stand-in .spm files (the
    import copies them; only translating reads them)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**CONFIG, **(changes or {})}))
    (directory / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(PIECES)}))
    tokenizer = {"source_lang": "en", "target_lang": "de", "unk_token": "<unk>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    for name in ("source.spm", "target.spm"):
        (directory / name).write_bytes(b"a SentencePiece model")
    save_file(
        marian_tensors() if tensors is None else tensors, str(directory / "model.safetensors")
    )
    return directory
