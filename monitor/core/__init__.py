"""The vocabulary every floor shares, pure: ``model`` (the value types that flow from fetch to
alerts), ``rules`` (every rule id), ``errors`` (the exception tree), ``times``, ``sampling``
(the URL checks' random order and estimates) and ``ipranges`` (which addresses may be
connected to)."""
