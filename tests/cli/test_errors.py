"""Every error in what the user gave ends a command with one line, `keras-transformer COMMAND:
error: ...`, and exit code 2; the rules behind those errors are the library's, worded with the
settings' parameter names, so a Python caller gets the same message."""

import pytest

from keras_transformer.cli import main
from keras_transformer.errors import ConfigError
from keras_transformer.export.exporter import ExportOptions
from keras_transformer.training.training_run import TrainingRun


def test_a_setting_out_of_range_ends_the_command_with_one_line_and_exit_code_2(tmp_path, capsys):
    argv = ["train", "--output", str(tmp_path / "run"), "--data-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--max-steps", "0"])
    assert stop.value.code == 2
    assert (
        capsys.readouterr().err == "keras-transformer train: error: max_steps 0 must be positive\n"
    )
    assert not (tmp_path / "run").exists()


def test_the_same_rule_speaks_of_parameters_to_a_python_caller(tmp_path):
    with pytest.raises(ConfigError, match="^max_steps 0 must be positive$"):
        TrainingRun(tmp_path / "run", tmp_path, max_steps=0)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"format": "tflite", "jit_compile": True}, "jit_compile applies to SavedModel exports"),
        ({"warmup_batch_sizes": (1, 8)}, "warmup_batch_sizes needs jit_compile"),
        ({"quantization": "int8"}, "quantization applies to format ctranslate2"),
        ({"format": "onnx"}, "format 'onnx' must be one of"),
    ],
)
def test_export_options_that_do_not_go_with_the_format_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        ExportOptions(**options)
