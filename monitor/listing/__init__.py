"""What a person asks to read, as pure values: ``params`` (a listing's parameters, cursors and
output formats), ``sorting`` (its sort orders) and ``story`` (one URL's story as text). The
rows themselves are read by ``monitor.store``; the command line and the HTTP port print them."""
