"""The health of listed URLs: pure verdicts, the HTTP client, the checker and its rounds."""
