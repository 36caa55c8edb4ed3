"""One source of truth for the Transformer's hyperparameters (paper §3, §5, Table 3).

`TransformerConfig` is a frozen dataclass. Named presets are derived from one another with
`dataclasses.replace`, never copied: `base` is the paper's base model, `big` its big model, each
row of Table 3 is `base` with the row's changes, and `small` / `tiny` are CPU-sized models.

Example:
>>> config = TransformerConfig.preset("base", vocab_size=37000)
>>> config.d_k, config.d_v
(64, 64)
>>> TransformerConfig.preset("C-N2").num_layers
2
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import typing
from pathlib import Path
from typing import Any

from keras_transformer.errors import ConfigError

__all__ = ["ConfigError", "TransformerConfig"]


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of the Transformer, named as in the paper.

    Attributes:
        vocab_size: size of the (shared) source/target subword vocabulary (§5.1).
        target_vocab_size: set it for separate source and target vocabularies; `None` shares one
            embedding between source, target and the pre-softmax projection (§3.4).
        num_layers: N, identical layers in the encoder and in the decoder (§3.1).
        d_model: width of every sub-layer output and of the embeddings (§3.1).
        d_ff: inner width of the position-wise feed-forward network (§3.3).
        num_heads: h, parallel attention heads (§3.2.2).
        d_k: query/key width per head; `None` means d_model / h as in the paper.
        d_v: value width per head; `None` means d_model / h.
        residual_dropout: P_drop, applied to each sub-layer output before the residual add, and to
            the sums of embeddings and positional encodings (§5.4).
        attention_dropout: dropout on attention weights; not in the paper, default 0.
        relu_dropout: dropout after the FFN's activation; not in the paper, default 0.
        ffn_activation: the activation between the FFN's two linear transformations: "relu"
            (Eq. 2, the paper), "swish" (x·σ(x): OPUS-MT's classic Marian models) or "gelu".
        subword_dropout: BPE-dropout (Provilkov et al., 2020), not in the paper, default 0: the
            training pairs are segmented anew each time they are read, every merge of the BPE
            model skipped with this probability, so the model sees many segmentations of each
            sentence; validation, decoding and export keep the deterministic one.
        label_smoothing: ε_ls (§5.4).
        positional_encoding: "sinusoidal" (§3.5) or "learned" (Table 3 row E).
        sinusoid_layout: where the sinusoids' dimensions lie: "interleaved" (§3.5's formula: even
            dimensions sine, odd cosine) or "halves" (all sines, then all cosines: Marian's and
            tensor2tensor's layout, which OPUS-MT models were trained with).
        max_length: longest sequence the model handles: size of the learned position table and of
            the preallocated decoding cache.
        tie_embeddings: share the target embedding with the pre-softmax projection (§3.4).
        output_bias: add a learned bias to the pre-softmax logits (Marian's `final_logits_bias`);
            the paper's projection has none.
        layer_norm_epsilon: ε of layer normalization; the paper does not state it.
        warmup_steps: warmup of the learning-rate schedule, Eq. 3 (§5.3).
        adam_beta_1, adam_beta_2, adam_epsilon: Adam hyperparameters (§5.3).
        train_steps: training steps of the paper's run for this model (§5.2, Table 3).
        batch_tokens: tokens per batch on each side, source and target (§5.1: about 25,000 over
            8 GPUs); split evenly between replicas.
        learning_rate_scale: factor on Eq. 3; 1.0 is the paper.
        qkv_initializer_fan: how Glorot-uniform counts the fans of the Q/K/V projection kernels
            `[d_model, h, d_k or d_v]`; not in the paper, which sets no initializer. "3d" (the
            default) counts the 3-D kernel, d_model as a receptive field, so they start narrower
            than a dense layer's; it came in by accident and is kept because it trains as well
            or better (keras_transformer/layers/head_projection.py). "matrix" counts the
            `[d_model, h·depth]` matrix: limit √(6 / (d_model + h·depth)), as
            `keras.layers.EinsumDense` would.
    """

    vocab_size: int = 37000
    target_vocab_size: int | None = None
    num_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    d_k: int | None = None
    d_v: int | None = None
    residual_dropout: float = 0.1
    attention_dropout: float = 0.0
    relu_dropout: float = 0.0
    ffn_activation: str = "relu"
    subword_dropout: float = 0.0
    label_smoothing: float = 0.1
    positional_encoding: str = "sinusoidal"
    sinusoid_layout: str = "interleaved"
    max_length: int = 256
    tie_embeddings: bool = True
    output_bias: bool = False
    layer_norm_epsilon: float = 1e-6
    warmup_steps: int = 4000
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    train_steps: int = 100_000
    batch_tokens: int = 25_000
    learning_rate_scale: float = 1.0
    qkv_initializer_fan: str = "3d"

    def __post_init__(self):
        self._check_types()
        # Resolve d_k = d_v = d_model / h here so every consumer sees concrete widths.
        if self.d_k is None or self.d_v is None:
            _require(self.num_heads > 0, "num_heads", self.num_heads, "must be positive")
            _require(
                self.d_model % self.num_heads == 0,
                "d_model",
                self.d_model,
                f"must be divisible by num_heads={self.num_heads} when d_k/d_v are not given",
            )
            per_head = self.d_model // self.num_heads
            object.__setattr__(self, "d_k", self.d_k if self.d_k is not None else per_head)
            object.__setattr__(self, "d_v", self.d_v if self.d_v is not None else per_head)
        self._validate()

    def _check_types(self):
        """Each value has its field's type, so that a wrong `--set` is named here rather than
        failing later inside the model. Numbers are taken as the field's Python type (an int
        serves as a float; numpy scalars serve too)."""
        for field, annotation in typing.get_type_hints(TransformerConfig).items():
            value = getattr(self, field)
            allowed = typing.get_args(annotation) or (annotation,)  # `int | None` → (int, None)
            if value is None and type(None) in allowed:
                continue
            # bool is an int in Python, but a count of True layers is a mistake, not a value.
            number = isinstance(value, numbers.Real) and not isinstance(value, bool)
            if float in allowed and number:
                object.__setattr__(self, field, float(value))
            elif int in allowed and number and isinstance(value, numbers.Integral):
                object.__setattr__(self, field, int(value))
            else:
                _require(
                    type(value) in allowed,
                    field,
                    value,
                    "must be " + " or ".join(t.__name__ for t in allowed),
                )

    def _validate(self):
        for name in ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v"):
            _require(getattr(self, name) > 0, name, getattr(self, name), "must be positive")
        _require(self.max_length > 0, "max_length", self.max_length, "must be positive")
        _require(self.warmup_steps > 0, "warmup_steps", self.warmup_steps, "must be positive")
        _require(self.batch_tokens > 0, "batch_tokens", self.batch_tokens, "must be positive")
        _require(
            self.learning_rate_scale > 0,
            "learning_rate_scale",
            self.learning_rate_scale,
            "must be positive",
        )
        if self.target_vocab_size is not None:
            _require(
                self.target_vocab_size > 0,
                "target_vocab_size",
                self.target_vocab_size,
                "must be positive",
            )
        regularizers = ("residual_dropout", "attention_dropout", "relu_dropout", "subword_dropout")
        for name in (*regularizers, "label_smoothing"):
            value = getattr(self, name)
            _require(0.0 <= value < 1.0, name, value, "must be in [0, 1)")
        for name, choices in CHOICES.items():
            _require(
                getattr(self, name) in choices,
                name,
                getattr(self, name),
                "must be one of " + ", ".join(map(repr, choices)),
            )
        _require(
            0.0 <= self.adam_beta_1 < 1.0, "adam_beta_1", self.adam_beta_1, "must be in [0, 1)"
        )
        _require(
            0.0 <= self.adam_beta_2 < 1.0, "adam_beta_2", self.adam_beta_2, "must be in [0, 1)"
        )
        _require(self.adam_epsilon > 0, "adam_epsilon", self.adam_epsilon, "must be positive")

    @property
    def shared_vocabulary(self) -> bool:
        return self.target_vocab_size is None

    @property
    def output_vocab_size(self) -> int:
        return self.vocab_size if self.target_vocab_size is None else self.target_vocab_size

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Builds a config from a mapping, rejecting unknown keys by name."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown config key(s) {unknown}; known keys are {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> TransformerConfig:
        """A copy with `changes` applied; unknown keys raise `ConfigError`."""
        return TransformerConfig.from_dict({**self.to_dict(), **_reset_derived(self, changes)})

    def with_overrides(self, assignments: list[str]) -> TransformerConfig:
        """Applies `key=value` strings (the CLI's `--set`), parsing values as JSON when possible."""
        changes = {}
        for assignment in assignments:
            key, sep, raw = assignment.partition("=")
            if not sep:
                raise ConfigError(f"an override is key=value, not {assignment!r}")
            changes[key.strip()] = _parse_value(raw.strip())
        return self.replace(**changes)

    @classmethod
    def preset(cls, name: str, **changes) -> TransformerConfig:
        """The named preset (see `PRESETS`) with optional `changes`."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; presets are {sorted(PRESETS)}")
        return PRESETS[name].replace(**changes) if changes else PRESETS[name]

    def variation(self, row: str) -> TransformerConfig:
        """This configuration with the change of Table 3 row `row` (§6.2), e.g. "A-h1"."""
        if row not in TABLE3_CHANGES:
            raise ConfigError(f"unknown Table 3 row {row!r}; rows are {sorted(TABLE3_CHANGES)}")
        return self.replace(**TABLE3_CHANGES[row])

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TransformerConfig:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_file(cls, path) -> TransformerConfig:
        """The configuration saved in `path` (a run's config.json); errors name the file."""
        saved = read_json_file(path)
        if not isinstance(saved, dict):
            raise ConfigError(f"{path} holds {type(saved).__name__}, not a configuration object")
        try:
            return cls.from_dict(saved)
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}") from None


# The settings that take one of a few names, and the names each takes.
CHOICES: dict[str, tuple[str, ...]] = {
    "positional_encoding": ("sinusoidal", "learned"),
    "sinusoid_layout": ("interleaved", "halves"),
    "ffn_activation": ("relu", "swish", "gelu"),
    "qkv_initializer_fan": ("3d", "matrix"),
}


def read_json_file(path) -> Any:
    """The value in a JSON file; a missing or unreadable one is a `ConfigError` naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path} not found: is {path.parent} a training run directory?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path} is not valid JSON ({error})") from None


def _require(condition: bool, field: str, value: Any, requirement: str):
    if not condition:
        raise ConfigError(f"TransformerConfig.{field}={value!r} {requirement}")


def _reset_derived(config: TransformerConfig, changes: dict[str, Any]) -> dict[str, Any]:
    """Lets d_k/d_v follow a change of d_model or h unless they were set explicitly.

    The paper always derives d_k = d_v = d_model / h except in Table 3 rows A-C, where the row
    states them; a preset that changes d_model or h without naming d_k must not keep stale widths.
    """
    if {"d_model", "num_heads"} & set(changes):
        changes = {"d_k": None, "d_v": None, **changes}
    return changes


def _parse_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


# Table 3 of the paper: each row's changes to base (blank cells = base). A row applies to any
# configuration the same way (`TransformerConfig.variation`), which is how the rows are tried on
# the smaller `multi30k` recipe (`keras_transformer/analysis/model_variations.py`).
TABLE3_CHANGES: dict[str, dict[str, Any]] = {
    # (A) vary heads, keeping h * d_k = d_model (constant computation, §3.2.2): the paper's
    # d_k = d_v = d_model / h, which follows from num_heads alone.
    "A-h1": dict(num_heads=1),
    "A-h4": dict(num_heads=4),
    "A-h16": dict(num_heads=16),
    "A-h32": dict(num_heads=32),
    # (B) smaller attention keys; d_v stays d_model / h.
    "B-dk16": dict(d_k=16),
    "B-dk32": dict(d_k=32),
    # (C) model size; d_k = d_v = d_model / h with d_model.
    "C-N2": dict(num_layers=2),
    "C-N4": dict(num_layers=4),
    "C-N8": dict(num_layers=8),
    "C-d256": dict(d_model=256),
    "C-d1024": dict(d_model=1024),
    "C-dff1024": dict(d_ff=1024),
    "C-dff4096": dict(d_ff=4096),
    # (D) regularization.
    "D-drop0.0": dict(residual_dropout=0.0),
    "D-drop0.2": dict(residual_dropout=0.2),
    "D-ls0.0": dict(label_smoothing=0.0),
    "D-ls0.2": dict(label_smoothing=0.2),
    # (E) learned positional embedding instead of sinusoids.
    "E-learned": dict(positional_encoding="learned"),
}


def _build_presets() -> dict[str, TransformerConfig]:
    base = TransformerConfig()
    presets = {
        "base": base,
        "big": base.replace(
            d_model=1024, d_ff=4096, num_heads=16, residual_dropout=0.3, train_steps=300_000
        ),
        # CPU-sized: the peers' "small" workload (../shared/peers), 3+3 layers of width 256.
        "small": base.replace(
            vocab_size=8000, num_layers=3, d_model=256, d_ff=1024, num_heads=4, batch_tokens=4096
        ),
        # Multi30k on a CPU: the published Transformer-Tiny recipe for EN->DE test_2016_flickr
        # (4+4 layers of width 128, 8k shared BPE, ~4k tokens a batch), and its schedule:
        # warmup 2000 to a peak of 5e-3 (scale 2.53 on Eq. 3). Dropout 0.2, not its 0.3: 0.3
        # scored lower in the recipe's time budget. A shorter warmup is worse even for short
        # runs (docs/DEFAULTS.md).
        "multi30k": base.replace(
            vocab_size=8000,
            num_layers=4,
            d_model=128,
            d_ff=256,
            num_heads=4,
            residual_dropout=0.2,
            warmup_steps=2000,
            learning_rate_scale=2.53,
            max_length=128,
            batch_tokens=4096,
        ),
        # Unit tests and smoke runs: seconds per step on one core.
        "tiny": base.replace(
            vocab_size=1000,
            num_layers=2,
            d_model=64,
            d_ff=128,
            num_heads=4,
            warmup_steps=400,
            max_length=64,
            batch_tokens=1024,
        ),
        # English constituency parsing, §6.3, on NLTK's 3,396-tree sample of the WSJ
        # (pipelines/ptb.py): the paper's 4 layers, at width 128 instead of its 1024. On a
        # corpus 12x smaller than the paper's WSJ, epochs matter more than width: width 128
        # (~2.3M parameters, a third of width 256's compute per token) trains several times
        # the epochs in the same time (docs/DEFAULTS.md).
        # Residual dropout 0.1, the paper's base value: at 0.3 a run's training loss stayed at
        # its validation loss (underfitting). A 4k word vocabulary (pipelines/datasets.py: the
        # commonest words of the ~11k types, the rest UNK, and every bracket label one token)
        # and a warmup reached within the first 12 epochs. max_length 256 holds every
        # validation and test tree (the longest is 140 tokens with BOS and EOS) and drops 2 of
        # the 3,396 training pairs; it also caps §6.3's input length + 300.
        "parsing": base.replace(
            vocab_size=4000,
            num_layers=4,
            d_model=128,
            d_ff=512,
            num_heads=4,
            residual_dropout=0.1,
            attention_dropout=0.1,
            warmup_steps=800,
            max_length=256,
            batch_tokens=4096,
        ),
    }
    presets.update({row: base.variation(row) for row in TABLE3_CHANGES})
    return presets


PRESETS: dict[str, TransformerConfig] = _build_presets()

# What Table 3 reports for each preset: (perplexity on newstest2013, BLEU, parameters in millions).
# None where the paper leaves the cell blank (same as base for parameters).
TABLE3_PAPER: dict[str, tuple[float, float, float | None]] = {
    "base": (4.92, 25.8, 65),
    "A-h1": (5.29, 24.9, None),
    "A-h4": (5.00, 25.5, None),
    "A-h16": (4.91, 25.8, None),
    "A-h32": (5.01, 25.4, None),
    "B-dk16": (5.16, 25.1, 58),
    "B-dk32": (5.01, 25.4, 60),
    "C-N2": (6.11, 23.7, 36),
    "C-N4": (5.19, 25.3, 50),
    "C-N8": (4.88, 25.5, 80),
    "C-d256": (5.75, 24.5, 28),
    "C-d1024": (4.66, 26.0, 168),
    "C-dff1024": (5.12, 25.4, 53),
    "C-dff4096": (4.75, 26.2, 90),
    "D-drop0.0": (5.77, 24.6, None),
    "D-drop0.2": (4.95, 25.5, None),
    "D-ls0.0": (4.67, 25.3, None),
    "D-ls0.2": (5.47, 25.7, None),
    "E-learned": (4.92, 25.7, None),
    "big": (4.33, 26.4, 213),
}
