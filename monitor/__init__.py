"""sitemap-monitor: watches XML sitemaps and reports what changed."""

__version__ = "0.1.0"
