"""TensorFlow Serving's model config file, parsed with its own proto: the policies and labels
read from hand-written files, and what is unsupported or wrong refused naming the file and the
line; `serve`'s choice between one model and a config file."""

from pathlib import Path

import pytest

from keras_transformer.errors import ConfigError
from keras_transformer.server.models.model_config import (
    All,
    Latest,
    ModelConfig,
    ModelsToServe,
    Specific,
    field_lines,
    parse_model_config,
    read_model_config_file,
)

TWO_MODELS = """\
# two language pairs
model_config_list {
  config {
    name: "m30k-ende"
    base_path: "saved_models/m30k-ende"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 2 versions: 1 } }
    version_labels { key: "stable" value: 1 }
    version_labels { key: 'canary' value: 2 }
  }
  config {
    name: "m30k-enfr"
    base_path: "/models/m30k-enfr"
    model_platform: "tensorflow"
    model_version_policy { latest { num_versions: 2 } }
  }
  config: [{ name: "all" base_path: "a" model_platform: "tensorflow"
             model_version_policy { all {} } },
           < name: "default" base_path: "d" model_type: TENSORFLOW >]
}
"""


def test_models_policies_and_labels_are_read_as_tf_serving_reads_them():
    assert parse_model_config(TWO_MODELS) == [
        ModelConfig(
            "m30k-ende",
            Path("saved_models/m30k-ende"),  # relative: to the working directory, as TF Serving
            Specific((1, 2)),
            {"stable": 1, "canary": 2},
        ),
        ModelConfig("m30k-enfr", Path("/models/m30k-enfr"), Latest(2)),
        ModelConfig("all", Path("a"), All()),
        ModelConfig("default", Path("d"), Latest(1)),
    ]


def test_latest_without_a_count_serves_one_version():
    text = 'model_config_list { config { name: "a" base_path: "a" model_platform: "tensorflow" '
    assert parse_model_config(text + "model_version_policy { latest {} } } }")[0] == ModelConfig(
        "a", Path("a"), Latest(1)
    )


def test_each_field_has_its_line():
    lines = field_lines(TWO_MODELS)
    config = (("model_config_list", 0), ("config", 0))
    assert lines[config].line == 3 and lines[config + (("name", 0),)].text == '"m30k-ende"'
    assert lines[config + (("version_labels", 1), ("key", 0))].line == 9
    assert lines[(("model_config_list", 0), ("config", 1), ("base_path", 0))].line == 13
    assert lines[(("model_config_list", 0), ("config", 3), ("name", 0))].line == 19


MODEL = 'name: "a" base_path: "a"'


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("model_config_list {\n config {\n nme: 3 } }", 3, 'has no field named "nme"'),
        ('model_config_list { config { name: "a" }', 1, "Expected"),
        ("", 1, "no model"),
        ("model_config_list {\n}", 1, "no model"),
        (
            "\ncustom_model_config { [type.googleapis.com/google.protobuf.StringValue] "
            '{ value: "x" } }',
            2,
            "custom_model_config is not supported",
        ),
        (
            f'model_config_list {{ config {{ {MODEL}\n model_platform: "pytorch" }} }}',
            2,
            "model_platform 'pytorch' is not served here",
        ),
        (f"model_config_list {{\n config {{ {MODEL} }} }}", 2, "model_platform '' is not served"),
        (
            f"model_config_list {{ config {{ {MODEL}\nmodel_type: OTHER }} }}",
            2,
            "model_type OTHER is not served here",
        ),
        (
            f'model_config_list {{ config {{ {MODEL} model_platform: "tensorflow"\n'
            "logging_config { } } }",
            2,
            "logging_config (request logging) is not supported",
        ),
        (
            'model_config_list {\n config { name: "a/b" base_path: "a" } }',
            2,
            "model name 'a/b' is empty or holds",
        ),
        (
            'model_config_list { config {\n name: "a" model_platform: "tensorflow" } }',
            2,
            "model 'a' has no base_path",
        ),
        (
            f'model_config_list {{\nconfig {{ {MODEL} model_platform: "tensorflow" }}\n'
            f'config {{ {MODEL} model_platform: "tensorflow" }} }}',
            3,
            "model 'a' is listed twice (first at line 2)",
        ),
        (
            f'model_config_list {{ config {{ {MODEL} model_platform: "tensorflow"\n'
            "model_version_policy { specific { } } } }",
            2,
            "a specific policy needs versions",
        ),
        (
            f'model_config_list {{ config {{ {MODEL} model_platform: "tensorflow"\n'
            "model_version_policy { specific { versions: 1 } }\n"
            'version_labels { key: "stable" value: 1 }\n'
            'version_labels { key: "canary" value: 2 } } }',
            4,
            "version label 'canary' names version 2, which the model_version_policy of 'a' "
            "does not serve",
        ),
        (
            f'model_config_list {{ config {{ {MODEL} model_platform: "tensorflow"\n'
            'version_labels { key: "a/b" value: 1 } } }',
            2,
            "version label 'a/b' is empty or holds",
        ),
    ],
)
def test_what_is_wrong_or_unsupported_is_refused_naming_the_file_and_line(text, line, message):
    with pytest.raises(ConfigError) as refusal:
        parse_model_config(text, "models.config")
    assert str(refusal.value).startswith(f"models.config:{line}: ")
    assert message in str(refusal.value)


def test_a_file_is_read_and_one_it_cannot_read_is_a_config_error(tmp_path):
    path = tmp_path / "models.config"
    path.write_text(TWO_MODELS)
    assert [model.name for model in read_model_config_file(path)][:2] == ["m30k-ende", "m30k-enfr"]
    with pytest.raises(ConfigError, match=f"cannot read the model config file {tmp_path}/none"):
        read_model_config_file(tmp_path / "none")


@pytest.mark.parametrize(
    "given, message",
    [
        ({}, "give model_name and model_base_path, or model_config_file"),
        ({"model_name": "a"}, "give model_name and model_base_path, or model_config_file"),
        (
            {"model_name": "a", "model_config_file": Path("f")},
            "give it, or model_name and model_base_path, not both",
        ),
        (
            {"model_config_file": Path("f"), "model_config_file_poll_wait_seconds": -1},
            "model_config_file_poll_wait_seconds -1 is below 0",
        ),
    ],
)
def test_one_model_or_a_config_file_not_both_nor_neither(given, message):
    with pytest.raises(ConfigError, match=message):
        ModelsToServe(**given)
