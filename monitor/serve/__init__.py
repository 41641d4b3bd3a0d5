"""The daemon's HTTP port: the JSON API and its listings, the web pages, auth and OpenAPI."""
