"""One check of one target: which documents to read, their results tallied, the write."""
