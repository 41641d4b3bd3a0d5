"""How the monitor reaches the network: which addresses may be fetched, and the connections."""
