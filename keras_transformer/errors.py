"""The one base class of every error this package raises about what a user gave it.

A command-line run maps each of them to one line and exit code 2; a Python caller catches
`KerasTransformerError`. Messages speak of parameters (the settings' field names), never of
command-line flags, since the Python API raises them too.
"""


class KerasTransformerError(Exception):
    """A setting, file or request this package cannot use; the message names it and why."""


class ConfigError(KerasTransformerError, ValueError):
    """A setting is unknown or impossible; the message names the parameter and its value."""
