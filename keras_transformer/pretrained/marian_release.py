"""A model as Marian itself releases it (OPUS-MT's downloads), read as the Hugging Face
checkpoint transformers' converter (`convert_marian_to_pytorch.py`) would make of it.

A release directory holds `decoder.yml` (naming the model `.npz` and the vocabulary `.yml`
files), the model `.npz` (Marian's parameters, its settings as YAML text in `special:model.yml`),
`source.spm` and `target.spm`, and the vocabulary (`piece: id`, YAML). `MarianRelease` gives the
`MarianCheckpoint` interface over it, so the import maps it as it maps a Hugging Face checkpoint:

    Marian                                       transformers
    Wemb [V, d]                                  model.shared.weight [V + 1, d]: a zero <pad> row
                                                 appended, which decoding starts from
    decoder_ff_logit_out_b [1, V]                final_logits_bias [1, V + 1] (0 for <pad>)
    {encoder,decoder}_l{i}_self_W{q,k,v,o}       model.….layers.{i-1}.self_attn.{q,k,v,out}_proj
      (matrices [in, out], vectors [1, n])         (.weight [out, in], .bias [n])
    decoder_l{i}_context_*                       ….encoder_attn.*
    …_{self,context}_Wo_ln_{scale,bias}          ….{self_attn,encoder_attn}_layer_norm.{weight,bias}
    …_ffn_W1, _b1, _W2, _b2                      ….fc1, fc2
    …_ffn_ffn_ln_{scale,bias}                    ….final_layer_norm

Settings come from `special:model.yml`; what transformers' Marian cannot represent is refused by
Marian's name of the setting. Marian's own layer norms use ε = 1e-6 (transformers' port: 1e-5),
and its sinusoids have no length limit: the import's `max_length` defaults to decoder.yml's
`max-length`, else Marian's default for translating, 1000. The search is the one the converter
writes for transformers' `generate()`: decoder.yml's `beam-size` beams.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from keras_transformer.pretrained.marian import (
    SOURCE_SPM,
    TARGET_SPM,
    MarianCheckpoint,
    UnsupportedCheckpointError,
)
from keras_transformer.pretrained.tensor_files import CheckpointTensors
from keras_transformer.run_directory import CheckpointError

DECODER_FILE = "decoder.yml"
SETTINGS_KEY = "special:model.yml"
MARIAN_LAYER_NORM_EPSILON = 1e-6
MARIAN_MAX_LENGTH = 1000  # `marian-decoder --max-length`'s default
CONVERTER_MAX_LENGTH = 512  # the generation `max_length` transformers' converter writes
PAD_PIECE = "<pad>"
# A layer's parameter: `encoder_l1_self_Wq`, `decoder_l6_ffn_ffn_ln_bias`.
LAYER_PARAMETER = re.compile(r"(?P<side>encoder|decoder)_l(?P<layer>\d+)_(?P<rest>\w+)")
# Marian's parameter names in a layer → transformers' (a decoder layer's `context_` ones too).
ATTENTION = {"self": "self_attn", "context": "encoder_attn"}
PROJECTIONS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
FEED_FORWARD = {
    "ffn_W1": "fc1.weight",
    "ffn_b1": "fc1.bias",
    "ffn_W2": "fc2.weight",
    "ffn_b2": "fc2.bias",
    "ffn_ffn_ln_scale": "final_layer_norm.weight",
    "ffn_ffn_ln_bias": "final_layer_norm.bias",
}
# Settings of a Marian transformer that transformers' Marian (and ours) requires, and what a
# different value would mean.
REQUIRED = {
    "type": ("transformer", "(not a transformer)"),
    "transformer-preprocess": ("", "(pre-norm residuals)"),
    "transformer-postprocess": ("dan", "(not dropout, add, norm after each sub-layer)"),
    "transformer-postprocess-emb": ("d", "(a layer norm on the embeddings)"),
    "transformer-train-position-embeddings": (False, "(learned positions)"),
    "transformer-no-projection": (False, "(attention without its output projection)"),
    "transformer-ffn-depth": (2, "(not two feed-forward layers)"),
    "transformer-decoder-autoreg": ("self-attention", "(not self-attention in the decoder)"),
    "tied-embeddings-all": (True, "(separate source, target or output embeddings)"),
    "right-left": (False, "(decodes right to left)"),
}


def holds_marian_release(directory) -> bool:
    """Whether `directory` is a Marian release (it holds decoder.yml)."""
    return (Path(directory) / DECODER_FILE).is_file()


class MarianRelease(MarianCheckpoint):
    """A Marian release directory as a `MarianCheckpoint` (see the module doc)."""

    layer_norm_epsilon = MARIAN_LAYER_NORM_EPSILON

    def __init__(self, directory):
        self.directory = Path(directory)
        for name in (SOURCE_SPM, TARGET_SPM):
            if not (self.directory / name).is_file():
                raise CheckpointError(
                    f"{self.directory / name} not found: the release is incomplete"
                )
        decoder = _read_yaml(self.directory / DECODER_FILE)
        if not (decoder.get("models") and decoder.get("vocabs")):
            raise CheckpointError(f"{self.directory / DECODER_FILE} names no models or vocabs")
        model_path = self.directory / decoder["models"][0]
        self.config_path = model_path
        parameters = _read_npz(model_path)
        self.marian_settings = _settings(parameters.pop(SETTINGS_KEY), model_path)
        self._refuse_what_transformers_cannot_represent()
        pieces = _read_vocabulary(self.directory / decoder["vocabs"][-1])
        if PAD_PIECE in pieces:
            raise CheckpointError(f"{self.directory}: the vocabulary already holds {PAD_PIECE}")
        if len(pieces) != self.marian_settings["dim-vocabs"][0]:
            raise CheckpointError(
                f"{self.directory}: the vocabulary holds {len(pieces)} pieces, the model "
                f"{self.marian_settings['dim-vocabs'][0]} (dim-vocabs)"
            )
        self.vocabulary = [*pieces, PAD_PIECE]  # as transformers' converter appends it
        self.tokenizer_settings = {}
        self.settings = self._transformers_settings(decoder)
        self.generation_path = self.directory / DECODER_FILE
        self.generation = self._transformers_generation(decoder)
        self.weights_path = model_path
        tensors = _transformers_tensors(parameters, model_path)
        self._tensors = CheckpointTensors(model_path, tensors, " (as transformers names it)")

    def _refuse_what_transformers_cannot_represent(self):
        settings = self.marian_settings
        for name, (required, meaning) in REQUIRED.items():
            if settings.get(name, required) != required:
                self.refuse(name, settings[name], meaning)
        if settings["enc-depth"] != settings["dec-depth"]:
            self.refuse("dec-depth", settings["dec-depth"], "differs from enc-depth")
        vocabularies = settings["dim-vocabs"]
        if len(set(vocabularies)) != 1:
            self.refuse("dim-vocabs", vocabularies, "(a source and a target vocabulary)")

    def _transformers_settings(self, decoder: dict) -> dict:
        """The config.json transformers' converter writes for the release."""
        settings = self.marian_settings
        pad = len(self.vocabulary) - 1
        return {
            "vocab_size": len(self.vocabulary),
            "d_model": settings["dim-emb"],
            "encoder_layers": settings["enc-depth"],
            "decoder_layers": settings["dec-depth"],
            "encoder_attention_heads": settings["transformer-heads"],
            "decoder_attention_heads": settings["transformer-heads"],
            "encoder_ffn_dim": settings["transformer-dim-ffn"],
            "decoder_ffn_dim": settings["transformer-dim-ffn"],
            "activation_function": settings.get("transformer-ffn-activation", "swish"),
            "max_position_embeddings": int(decoder.get("max-length", MARIAN_MAX_LENGTH)),
            # The release does not record training's dropout; OPUS-MT trains with 0.1.
            "dropout": 0.1,
            "scale_embedding": True,
            "pad_token_id": pad,
            "decoder_start_token_id": pad,
            "eos_token_id": self.vocabulary.index("</s>"),
        }

    def _transformers_generation(self, decoder: dict) -> dict:
        """The generation settings transformers' converter writes for the release: decoder.yml's
        `beam-size`, a fixed `max_length` and `<pad>` banned."""
        pad = self.settings["pad_token_id"]
        beams = {"num_beams": _typed(decoder["beam-size"])} if "beam-size" in decoder else {}
        return {**beams, "max_length": CONVERTER_MAX_LENGTH, "bad_words_ids": [[pad]]}


def _transformers_tensors(parameters: dict[str, np.ndarray], path: Path) -> dict[str, np.ndarray]:
    """Marian's parameters under transformers' names and layouts; the `<pad>` row appended."""
    for name in ("Wemb", "decoder_ff_logit_out_b"):
        if name not in parameters:
            raise CheckpointError(f"{path} holds no tensor {name!r}: the checkpoint is broken")
    embedding = parameters.pop("Wemb")
    bias = parameters.pop("decoder_ff_logit_out_b")
    tensors = {
        "model.shared.weight": np.concatenate([embedding, np.zeros_like(embedding[:1])]),
        "final_logits_bias": np.concatenate([bias, np.zeros_like(bias[:, :1])], axis=1),
    }
    for name, parameter in parameters.items():
        # Matrices `[in, out]` become torch's `[out, in]`; vectors `[1, n]` lose their first axis.
        transformers_layout = parameter.T if parameter.shape[0] != 1 else parameter[0]
        tensors[_transformers_name(name, path)] = transformers_layout
    return tensors


def _transformers_name(name: str, path: Path) -> str:
    """`encoder_l1_self_Wq` → `model.encoder.layers.0.self_attn.q_proj.weight`, and so on."""
    match = LAYER_PARAMETER.fullmatch(name)
    rest = match and match["rest"]
    block, _, part = (rest or "").partition("_")
    if rest in FEED_FORWARD:
        layer_name = FEED_FORWARD[rest]
    elif block in ATTENTION and part in ("Wo_ln_scale", "Wo_ln_bias"):
        layer_name = (
            f"{ATTENTION[block]}_layer_norm.{'weight' if part.endswith('scale') else 'bias'}"
        )
    elif block in ATTENTION and len(part) == 2 and part[0] in "Wb" and part[1] in PROJECTIONS:
        kind = "weight" if part[0] == "W" else "bias"
        layer_name = f"{ATTENTION[block]}.{PROJECTIONS[part[1]]}.{kind}"
    else:
        raise CheckpointError(f"{path}: parameter {name!r} is none that a Marian transformer has")
    return f"model.{match['side']}.layers.{int(match['layer']) - 1}.{layer_name}"


def _settings(text: np.ndarray, path: Path) -> dict:
    """special:model.yml: YAML text as int8 characters, NUL-terminated."""
    settings = _yaml(text.tobytes().rstrip(b"\0").decode("utf-8"), path)
    return {name: _typed(value) for name, value in settings.items()}


def _typed(value):
    """A YAML value read as text (`yaml.BaseLoader`, as transformers' converter reads it):
    booleans and integers as such, lists item by item."""
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if value in ("true", "false"):
        return value == "true"
    try:
        return int(value)
    except ValueError:
        return value


def _read_vocabulary(path: Path) -> list[str]:
    ids = _read_yaml(path)
    pieces = [""] * len(ids)
    for piece, marian_id in ids.items():
        pieces[int(marian_id)] = piece
    if sorted(int(i) for i in ids.values()) != list(range(len(ids))):
        raise CheckpointError(f"{path} does not map pieces to the ids 0 .. n-1, each once")
    return pieces


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {path}: {error}") from error


def _read_yaml(path: Path):
    if not path.is_file():
        raise CheckpointError(f"{path} not found: the Marian release is incomplete")
    return _yaml(path.read_text(encoding="utf-8"), path)


def _yaml(text: str, path: Path):
    try:
        import yaml
    except ModuleNotFoundError:
        raise UnsupportedCheckpointError(
            f"reading the Marian release {path.parent} needs pyyaml: "
            "pip install 'keras-transformer[pretrained]'"
        ) from None
    try:
        return yaml.load(text, Loader=yaml.BaseLoader)  # every value as text: no type guessing
    except yaml.YAMLError as error:
        raise CheckpointError(f"{path} is not YAML: {error}") from error
