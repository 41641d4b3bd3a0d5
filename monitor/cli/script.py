"""The ``sitemap-monitor`` console script, kept apart from ``monitor.cli.commands``.

The digest worker processes (multiprocessing's forkserver) run the console script's imports
again, as ``__mp_main__``, before their first document. Importing ``monitor.cli.commands``
there, with the configuration's pydantic models and asyncio, cost every worker ~0.15 s of
start-up, on the way to a first check's first parallel digest. So this module imports nothing
itself.
"""

from __future__ import annotations


def script() -> None:
    """``monitor.cli.commands.script``: ``main``, then the quick exit."""
    from monitor.cli import commands as cli

    cli.script()
