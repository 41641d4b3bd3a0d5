"""The daemon, ``sitemap-monitor run``: ``app`` wires the configuration, the engine, the
fetcher, the pools, the scheduler, the HTTP port and the signals; ``pruning`` is its periodic
pruning job."""
