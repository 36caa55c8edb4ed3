"""How a checkpoint's authors decode it: transformers' generation config as our `SearchSettings`.

transformers' `generate()` reads a checkpoint's generation_config.json, else the generation
fields of its config.json (older OPUS-MT uploads keep `num_beams`, `max_length` and
`bad_words_ids` there: `GenerationConfig.from_model_config`); a field left out takes
`GenerationConfig`'s default. The import records the search they give as the run's own
(run.json's `search`), which every command starts from:

    num_beams              (default 1)     beam_size
    length_penalty         (default 1.0)   alpha, with penalty "length": generate() divides
                                           log P(Y) by |Y|^length_penalty
    num_return_sequences   (default 1)     n_best

Every other field is left out, and `left_out` names those that differ from `GenerationConfig`'s
default, and why (`WHY_LEFT_OUT`): `max_length` and `max_new_tokens` are a fixed limit, where
ours is the input's length + `extra_length` within the model's `max_length`; `early_stopping` is
a guess at when the search may stop, where ours stops exactly (as `early_stopping="never"`); the
rest (sampling, repetition penalties, `renormalize_logits`) have no `SearchSettings` field. The
token ids are the import's id mapping's, and `bad_words_ids` `[[pad_token_id]]` is what every
search does already: it never generates Marian's `<pad>` (our BOS).

Example:
>>> search, left_out = generation_search({"num_beams": 4, "max_length": 512}, "config.json")
>>> search
{'beam_size': 4, 'alpha': 1.0, 'penalty': 'length', 'n_best': 1}
>>> left_out
['max_length=512 (a fixed limit: ours is the input length + extra_length)']
"""

from __future__ import annotations

from keras_transformer.errors import ConfigError
from keras_transformer.search_settings import SearchSettings

GENERATION_CONFIG_FILE = "generation_config.json"
# `GenerationConfig`'s defaults of the fields a Marian checkpoint may set: what generate() uses
# where a checkpoint sets none, and the generation fields of a config.json.
GENERATION_DEFAULTS = {
    "num_beams": 1,
    "length_penalty": 1.0,
    "num_return_sequences": 1,
    "early_stopping": False,
    "max_length": 20,
    "max_new_tokens": None,
    "min_length": 0,
    "min_new_tokens": None,
    "do_sample": False,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "renormalize_logits": False,
    "bad_words_ids": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
}
# generation field → `SearchSettings` field.
MAPPED = {"num_beams": "beam_size", "length_penalty": "alpha", "num_return_sequences": "n_best"}
# Why a field is left out, where not for want of a `SearchSettings` field.
FIXED_LIMIT = "a fixed limit: ours is the input length + extra_length"
WHY_LEFT_OUT = {
    "max_length": FIXED_LIMIT,
    "max_new_tokens": FIXED_LIMIT,
    "early_stopping": "ours stops exactly, as early_stopping 'never'",
}
# Fields that are no search's: the token ids the import maps, what generate() returns beside
# the ids, and bookkeeping.
NOT_SEARCH = {
    "pad_token_id",
    "eos_token_id",
    "bos_token_id",
    "decoder_start_token_id",
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "output_scores",
    "return_dict_in_generate",
    "transformers_version",
    "_from_model_config",
}


def model_config_generation(settings: dict) -> dict:
    """The generation fields of a config.json, as `GenerationConfig.from_model_config` reads
    them where a checkpoint has no generation_config.json."""
    return {name: value for name, value in settings.items() if name in GENERATION_DEFAULTS}


def generation_search(generation: dict, path) -> tuple[dict, list[str]]:
    """The `SearchSettings` fields (a dict, as run.json records it) of `generation`, the
    generation fields read from `path`; and `name=value (why)` of each field left out that
    differs from `GenerationConfig`'s default (see the module doc).

    A value `SearchSettings` refuses is a `ConfigError` naming `path` and the field.
    """
    search = SearchSettings(penalty="length")
    for theirs, ours in MAPPED.items():
        value = generation.get(theirs)
        value = GENERATION_DEFAULTS[theirs] if value is None else value
        try:
            search = search.replace(**{ours: value})
        except ConfigError as error:
            raise ConfigError(f"{path}: {theirs}={value!r} is no search here: {error}") from None
    pad = generation.get("pad_token_id")
    left_out = [
        f"{name}={value!r} ({WHY_LEFT_OUT.get(name, 'no SearchSettings field')})"
        for name, value in sorted(generation.items())
        if name not in MAPPED
        and name not in NOT_SEARCH
        and value != GENERATION_DEFAULTS.get(name)
        and not (name == "bad_words_ids" and value == [[pad]])
    ]
    fields = {ours: getattr(search, ours) for ours in ("beam_size", "alpha", "penalty", "n_best")}
    return fields, left_out
