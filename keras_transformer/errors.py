"""The one base class of every error this package raises about what a user gave it
(`base_errors.KerasTransformerError`, shared with `pipelines` and `durable_files`), and
`ConfigError`, a setting that cannot be used.

A command-line run maps each of them to one line and exit code 2; a Python caller catches
`KerasTransformerError`. Messages speak of parameters (the settings' field names), never of
command-line flags, since the Python API raises them too.
"""

from base_errors import KerasTransformerError

__all__ = ["ConfigError", "KerasTransformerError"]


class ConfigError(KerasTransformerError, ValueError):
    """A setting is unknown or impossible; the message names the parameter and its value."""
