"""The connector's own error types (engine errors come from raftlog.client)."""

from __future__ import annotations


class OptionError(ValueError):
    """A data source option is missing or malformed; the text names it and the expected form."""


class SchemaMismatchError(ValueError):
    """Data written to a topic does not have the topic's Arrow schema; the text shows both."""


class DataLossError(RuntimeError):
    """Offsets a read needs were removed by retention (failOnDataLoss=true)."""
