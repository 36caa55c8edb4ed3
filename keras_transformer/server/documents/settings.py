"""The settings of document translation (`/translate_file`): what a file may hold, and how long
its translation waits to be downloaded; `keras-transformer serve`'s flags are made from them."""

from dataclasses import dataclass, field

from keras_transformer.errors import ConfigError


@dataclass(frozen=True)
class DocumentSettings:
    """Limits of one document, each checked before any of it is translated."""

    files_translation: bool = field(
        default=True,
        metadata={"help": "LibreTranslate's /translate_file (documents)", "negatable": True},
    )
    max_file_bytes: int = field(
        default=2 * 1024 * 1024,
        metadata={"help": "bytes of a document (within max_body_bytes); beyond: 413"},
    )
    max_file_sentences: int = field(
        default=2000, metadata={"help": "sentences of a document; beyond: 400"}
    )
    max_unpacked_bytes: int = field(
        default=64 * 1024 * 1024,
        metadata={
            "help": "bytes of a zip-based document (.docx, .odt, .odp, .pptx, .epub) once "
            "unpacked, as its directory declares them, checked before unpacking; beyond: 413"
        },
    )
    max_compression_ratio: int = field(
        default=200,
        metadata={
            "help": "unpacked to packed bytes of a zip-based document (a zip bomb's is "
            "thousands); beyond: 413"
        },
    )
    download_expiry_s: float = field(
        default=600.0,
        metadata={
            "help": "seconds a translated document can be downloaded from its URL, after "
            "which it is deleted"
        },
    )

    def __post_init__(self):
        for name in (
            "max_file_bytes",
            "max_file_sentences",
            "max_unpacked_bytes",
            "max_compression_ratio",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} {getattr(self, name)} is below 1")
        if not self.download_expiry_s > 0:
            raise ConfigError(f"download_expiry_s {self.download_expiry_s} is not above 0")
