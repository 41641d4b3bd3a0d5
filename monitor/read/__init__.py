"""Reading one document: fetch, inflate, parse, extensions, validate, diff, digest and re-read.

Everything here but ``fetch`` is pure: bytes in, entries, issues and changes out. ``digest``
composes the pure steps for one document; ``reread`` compares a document with its stored set.
"""
