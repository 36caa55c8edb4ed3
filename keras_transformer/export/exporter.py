"""One export of a `Translator` in one of three formats, with the options that format takes.

`ExportOptions` checks that the options go with the format (a rule of the exports, not of the
command line: XLA runs in a SavedModel only, and only XLA compiles at warm-up); `export` writes
it. The `help` of each field documents it; `keras-transformer export`'s flags are generated from
them.
"""

import dataclasses
from pathlib import Path

from keras_transformer.errors import ConfigError, KerasTransformerError
from keras_transformer.export.layout import TFLITE_QUANTIZATIONS
from keras_transformer.search_settings import SearchSettings

FORMATS = ("saved_model", "tflite", "ctranslate2")


class MissingExtraError(KerasTransformerError, ModuleNotFoundError):
    """An export format needs an optional extra that is not installed; the message says which."""


def _option(default, help, **metadata):
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """The format of an export and its options; `jit_compile` is the search's (SavedModel)."""

    format: str = _option("saved_model", "the export's format", choices=FORMATS)
    jit_compile: bool = _option(False, "SavedModel: search with XLA", cli=False)
    warmup_batch_sizes: tuple[int, ...] | None = _option(
        None,
        "with jit_compile: the request sizes (sentences) the warm-up compiles at every width "
        "when a server loads the export; default 1. Give a server's batch sizes, e.g. TF "
        "Serving's allowed_batch_sizes: each adds a compilation a width to the load",
        metavar="N",
    )
    quantize: str | None = _option(
        None,
        "tflite: weights as int8 (dynamic-range quantization) or float16 (default: float32)",
        choices=TFLITE_QUANTIZATIONS,
    )
    source_length: int | None = _option(
        None, "tflite: max source subwords with EOS (default 64, or the model's max_length)"
    )
    batch_size: int = _option(
        1,
        "tflite: the sentences one call decodes, fixed at export; more keep LiteRT's int8 "
        "kernels busier, at the cost of a larger decoding cache",
        metavar="N",
    )
    quantization: str | None = _option(
        None,
        "ctranslate2: its weight type: int8, int8_float32, int8_float16, int16, float16, "
        "bfloat16 (default: float32)",
    )
    source_language: str | None = _option(
        None,
        "saved_model, tflite to a base path: the source language code the export records "
        "(default: the run's "
        "source_language in its run.json)",
    )
    target_language: str | None = _option(
        None,
        "saved_model, tflite to a base path: the target language code the export records "
        "(default: the run's "
        "target_language in its run.json)",
    )

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ConfigError(f"format {self.format!r} must be one of {FORMATS}")
        if self.quantize and self.format != "tflite":
            raise ConfigError("quantize applies to format tflite (CTranslate2: quantization)")
        if self.quantization and self.format != "ctranslate2":
            raise ConfigError("quantization applies to format ctranslate2 (TFLite: quantize)")
        if self.jit_compile and self.format != "saved_model":
            raise ConfigError(
                f"jit_compile applies to SavedModel exports; {self.format} has no XLA"
            )
        if self.warmup_batch_sizes and not self.jit_compile:
            raise ConfigError("warmup_batch_sizes needs jit_compile: only XLA compiles at warm-up")
        if (self.source_language or self.target_language) and self.format == "ctranslate2":
            raise ConfigError(
                "source_language and target_language apply to formats saved_model and tflite"
            )
        if self.batch_size != 1 and self.format != "tflite":
            raise ConfigError("batch_size applies to format tflite (a SavedModel takes any batch)")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size {self.batch_size} must be >= 1")
        if self.warmup_batch_sizes and min(self.warmup_batch_sizes) < 1:
            raise ConfigError(f"warmup_batch_sizes {list(self.warmup_batch_sizes)} must be >= 1")


def export(
    translator, output, options: ExportOptions, search: SearchSettings, run_dir=None
) -> Path:
    """Writes `translator` to `output` as `options` say; returns the path written. `search` is
    fixed in a SavedModel's `serving_default` and a TFLite model; CTranslate2 takes its search
    when it translates. `run_dir`, the run `translator` comes from, gives the languages a
    SavedModel records where `options` do not."""
    if options.format == "ctranslate2":
        return _export_ctranslate2()(translator, output, options.quantization)
    if options.format == "tflite":
        from keras_transformer.export.tflite import export_tflite

        return export_tflite(
            translator,
            output,
            quantize=options.quantize,
            source_length=options.source_length,
            search=search,
            languages=exported_languages(options, run_dir),
            batch_size=options.batch_size,
        )
    from keras_transformer.export.saved_model import export_saved_model

    sizes = options.warmup_batch_sizes or (1,)
    languages = exported_languages(options, run_dir)
    return export_saved_model(translator, output, search, options.jit_compile, sizes, languages)


def exported_languages(options: ExportOptions, run_dir=None) -> tuple[str | None, str | None]:
    """The (source, target) language codes of an export: the options', else the run's."""
    from keras_transformer import run_directory

    settings = run_directory.read_settings(run_dir) if run_dir else {}
    return (
        options.source_language or settings.get("source_language"),
        options.target_language or settings.get("target_language"),
    )


def export_size(path) -> int:
    """The bytes an export takes: its file's, or the sum of its directory's files."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def _export_ctranslate2():
    try:
        from keras_transformer.export.ctranslate2_export import export_ctranslate2
    except ModuleNotFoundError as error:  # ctranslate2: the [ctranslate2] extra
        raise MissingExtraError(
            f"format ctranslate2 needs the ctranslate2 extra ({error}): "
            "pip install 'keras-transformer[ctranslate2]'"
        ) from None
    return export_ctranslate2
