"""How a search decodes (§6.1): beam size, length penalty α, the output-length limits.

One frozen `SearchSettings` travels through every Python API that searches (decoding, serving,
evaluation, distillation, the training callbacks); the command line's search flags are generated
from its fields. Signatures, REST and TFLite keep their tensors.

Example:
>>> settings = SearchSettings(beam_size=4, alpha=0.6)
>>> settings.replace(beam_size=1).beam_size
1
>>> SearchSettings(beam_size=0)
Traceback (most recent call last):
...
keras_transformer.errors.ConfigError: beam_size 0 must be an integer of at least 1
"""

from __future__ import annotations

import dataclasses
import math

from keras_transformer.errors import ConfigError

# The length penalties lp(Y) (`decoding.beam_search.length_penalty`): GNMT's, §6.1's; and |Y|^α,
# Marian's, transformers' and fairseq's.
PENALTIES = ("gnmt", "length")


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """The settings of one beam search; `help` in each field's metadata documents it.

    The search stops once the `n_best` best hypotheses of each sentence are final: a
    hypothesis still open cannot overtake them (the exact stopping rule of §6.1's search).
    """

    beam_size: int = dataclasses.field(
        default=4,
        metadata={"help": "beam size; 1 decodes greedily (§6.1: 4)", "flag": "--beam"},
    )
    alpha: float = dataclasses.field(default=0.6, metadata={"help": "length penalty α (§6.1: 0.6)"})
    penalty: str = dataclasses.field(
        default="gnmt",
        metadata={
            "help": "lp(Y), which a score divides log P by: gnmt ((5 + |Y|) / 6)^α (§6.1) or "
            "length |Y|^α (Marian's and transformers', for imported models)",
            "choices": PENALTIES,
        },
    )
    extra_length: int = dataclasses.field(
        default=50,
        metadata={"help": "longest output = input length + this, at most max_length (§6.1: 50)"},
    )
    n_best: int = dataclasses.field(
        default=1,
        metadata={"help": "hypotheses returned per sentence, best first: 1 to beam_size"},
    )
    min_length: int = dataclasses.field(
        default=0,
        metadata={
            "help": "no EOS before this many output tokens; at the longest output length, "
            "every output is that long (benchmarks that must decode a fixed number of steps)"
        },
    )

    def __post_init__(self):
        _require_int(self, "beam_size", minimum=1)
        _require_int(self, "extra_length", minimum=0)
        _require_int(self, "n_best", minimum=1)
        _require_int(self, "min_length", minimum=0)
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)):
            raise ConfigError(f"alpha {self.alpha!r} must be a number")
        if not math.isfinite(self.alpha) or self.alpha < 0:
            raise ConfigError(f"alpha {self.alpha} must be finite and at least 0")
        if self.penalty not in PENALTIES:
            raise ConfigError(f"penalty {self.penalty!r} must be one of {', '.join(PENALTIES)}")
        if self.n_best > self.beam_size:
            raise ConfigError(
                f"n_best {self.n_best} must be 1 to beam_size {self.beam_size}: a search keeps "
                "beam_size hypotheses"
            )

    def replace(self, **changes) -> SearchSettings:
        """A copy with `changes`; a change of `None` keeps the current value."""
        return dataclasses.replace(
            self, **{name: value for name, value in changes.items() if value is not None}
        )


def _require_int(settings, name: str, minimum: int):
    value = getattr(settings, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} {value!r} must be an integer of at least {minimum}")


# §6.3: the parsing search (beam 21, α 0.3, input length + 300).
PARSING_SEARCH = SearchSettings(beam_size=21, alpha=0.3, extra_length=300)
