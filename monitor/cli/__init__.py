"""The command line: ``sitemap-monitor`` and its commands.

``script`` is the console script and imports nothing itself (the digest workers import it
again at their start); ``commands`` parses the arguments and runs each command, whose own
modules (``validatefile``, ``robots``, ``indexnow``, ``demo``) it imports only when that command
runs. This package's ``__init__`` stays empty of imports for the same reason.
"""
