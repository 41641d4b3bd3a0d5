"""How entry sets, their deltas and change rows are stored as bytes (pure: no I/O, no SQL)."""
