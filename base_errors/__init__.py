"""The one base class of every error the project raises about what a user gave it, in a package
of its own at the bottom of the house, so that `durable_files`, `pipelines` and
`keras_transformer` all raise it without importing one another. The standard library only."""


class KerasTransformerError(Exception):
    """A setting, file or request this project cannot use; the message names it and why."""
