"""IndexNow: telling search engines what a check changed, durably and once."""
