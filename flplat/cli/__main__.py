"""``python -m flplat.cli``: the ``flplat`` command."""

from flplat.cli import entry

entry()
