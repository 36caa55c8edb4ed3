import numpy as np
import pytest

from keras_transformer import PRESETS, ConfigError, TransformerConfig


def test_base_preset_is_the_paper_base_model():
    config = TransformerConfig.preset("base")
    assert (config.num_layers, config.d_model, config.d_ff, config.num_heads) == (6, 512, 2048, 8)
    assert (config.d_k, config.d_v, config.residual_dropout, config.label_smoothing) == (
        64,
        64,
        0.1,
        0.1,
    )
    assert (config.adam_beta_1, config.adam_beta_2, config.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert config.warmup_steps == 4000 and config.positional_encoding == "sinusoidal"


def test_big_preset_is_the_paper_big_model():
    config = TransformerConfig.preset("big")
    assert (config.d_model, config.d_ff, config.num_heads, config.residual_dropout) == (
        1024,
        4096,
        16,
        0.3,
    )
    assert config.d_k == config.d_v == 64


@pytest.mark.parametrize(
    "name, expected",
    [
        ("A-h1", dict(num_heads=1, d_k=512, d_v=512)),
        ("A-h32", dict(num_heads=32, d_k=16, d_v=16)),
        ("B-dk16", dict(d_k=16, d_v=64)),
        ("C-d256", dict(d_model=256, d_k=32, d_v=32, num_heads=8)),
        ("C-N8", dict(num_layers=8)),
        ("D-ls0.0", dict(label_smoothing=0.0)),
        ("E-learned", dict(positional_encoding="learned")),
    ],
)
def test_table3_rows_change_only_what_the_row_says(name, expected):
    config, base = TransformerConfig.preset(name), TransformerConfig.preset("base")
    for key, value in expected.items():
        assert getattr(config, key) == value
    changed = {k for k, v in config.to_dict().items() if v != getattr(base, k)}
    assert changed <= set(expected)


def test_every_table3_row_has_a_preset():
    rows = [n for n in PRESETS if n[0] in "ABCDE" and "-" in n]
    assert len(rows) == 18


def test_changing_d_model_rederives_head_widths():
    assert TransformerConfig.preset("base", d_model=256).d_k == 32


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="d_modle"):
        TransformerConfig.from_dict({"d_modle": 512})
    with pytest.raises(ConfigError, match="d_modle"):
        TransformerConfig.preset("base").with_overrides(["d_modle=3"])


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(d_model=500), "d_model"),
        (dict(residual_dropout=-0.1), "residual_dropout"),
        (dict(label_smoothing=1.0), "label_smoothing"),
        (dict(positional_encoding="rotary"), "positional_encoding"),
        (dict(ffn_activation="tanh"), "ffn_activation"),
        (dict(sinusoid_layout="shuffled"), "sinusoid_layout"),
        (dict(num_layers=0), "num_layers"),
    ],
)
def test_impossible_values_name_the_field(changes, field):
    with pytest.raises(ConfigError, match=field):
        TransformerConfig.preset("base", **changes)


@pytest.mark.parametrize(
    "override, message",
    [
        ("num_layers=abc", "num_layers='abc' must be int"),
        ("num_layers=2.5", "num_layers=2.5 must be int"),
        ("tie_embeddings=1", "tie_embeddings=1 must be bool"),
        ('d_k="64"', "d_k='64' must be int or NoneType"),
    ],
)
def test_a_value_of_the_wrong_type_names_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        TransformerConfig.preset("base").with_overrides([override])


def test_an_int_serves_as_a_float_and_numpy_numbers_as_python_ones():
    config = TransformerConfig.preset("base").with_overrides(["residual_dropout=0"])
    assert config.residual_dropout == 0.0 and isinstance(config.residual_dropout, float)
    config = TransformerConfig.preset("base", num_layers=np.int64(2), label_smoothing=np.float32(0))
    assert type(config.num_layers) is int and type(config.label_smoothing) is float


def test_unknown_preset_lists_presets():
    with pytest.raises(ConfigError, match="base"):
        TransformerConfig.preset("huge")


def test_json_round_trip_and_overrides():
    config = TransformerConfig.preset("small").with_overrides(["residual_dropout=0.3", "d_ff=512"])
    assert (config.residual_dropout, config.d_ff) == (0.3, 512)
    assert TransformerConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"d_model": 512,', r"config\.json is not valid JSON \(Expecting"),
        (b"[1, 2]", r"config\.json holds list, not a configuration object"),
        (b'{"d_model": "wide"}', r"config\.json: TransformerConfig\.d_model='wide' must be int"),
        (None, r"config\.json not found: is .*run a training run directory\?"),
    ],
)
def test_a_saved_configuration_that_cannot_be_read_names_the_file(tmp_path, content, message):
    path = tmp_path / "run" / "config.json"
    path.parent.mkdir()
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        TransformerConfig.from_file(path)


def test_the_options_for_pretrained_models_default_to_the_paper():
    base = TransformerConfig.preset("base")
    assert (base.ffn_activation, base.output_bias, base.sinusoid_layout) == (
        "relu",
        False,
        "interleaved",
    )
