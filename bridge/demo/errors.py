"""Errors raised by the demo (`dts demo`)."""

from __future__ import annotations

from bridge.errors import DtsError


class DemoError(DtsError):
    """A part of the demo did not start or did not make progress; the message says where to look.

    Also the base class of the demo's other errors."""


class ReportDataMissing(DemoError):
    """The run exported none of the metrics the report charts (the service was down?)."""


class RunDirError(DemoError):
    """The demo directory cannot be used or removed (it is not one the demo made)."""
