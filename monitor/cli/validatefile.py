"""``validate FILE``: one sitemap file on disk, read and digested as a check reads a document
(``monitor.read.digest``), with the rule a check judges over a whole target
(hreflang-not-reciprocal) judged within the file."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.config import Config
from monitor.core.errors import ConfigError, FetchError
from monitor.core.model import CheckResult, DocumentResult, Entry, Issue
from monitor.core.rules import RuleId, rule_id

if TYPE_CHECKING:  # the reading modules are imported by the command that uses them
    from monitor.read.digest import Digest

__all__ = ["validate_file"]

IN_THIS_FILE = "loc is listed more than once in this file"


def validate_file(path: Path, cfg: Config) -> CheckResult:
    """``validate FILE``: one sitemap file read, inflated and digested as a check would; nothing
    stored."""
    from monitor.net import inflate
    from monitor.read import digest, validate
    from monitor.read.workers import Spool

    url = path.resolve().as_uri()
    d = cfg.defaults
    size = 0
    body = Spool()  # in memory while small, then in a file, as a fetched body is
    try:
        try:
            # Bounded while it inflates, as a fetch is: a gzip bomb stops at max_bytes.
            for chunk in inflate.read_file(str(path), url, d.max_bytes):
                size += len(chunk)
                body.write(chunk)
            body.finish()
        except OSError as exc:
            raise ConfigError(f"{path}: {exc.strerror or exc}") from None
        except FetchError as exc:
            doc = DocumentResult(url=url, outcome="failed", bytes=size)
            return _failed(path, doc, Issue(rule_id(exc.kind), exc.message, document=url))
        found = digest.digest(digest.Job(
            url=url, now=datetime.now(UTC), max_bytes=d.max_bytes, max_urls=d.max_urls,
            max_children=d.max_children, path=body.path,
            body=None if body.data is None else bytes(body.data),
            examples=sys.maxsize,  # every issue: nothing is stored to list them later
            fingerprints=False))
    finally:
        body.close()
    if found.failure is not None:
        return _failed(path, DocumentResult(url=url, outcome="failed", kind=found.kind,
                                            bytes=size), found.failure)
    issues = [*found.issues,
              *filter(None, (validate.child_issue(c, url) for c in found.children)),
              *found.entry_issues, *_not_reciprocal(found, url)]
    # one file, not a target of several documents
    issues = [replace(i, message=IN_THIS_FILE) if i.rule == RuleId.LOC_DUPLICATE else i
              for i in issues]
    doc = DocumentResult(url=url, outcome="ok", kind=found.kind, bytes=size, urls=found.urls,
                         invalid=found.invalid, duplicates=found.duplicates)
    return CheckResult(target=str(path), url=url, outcome="ok", documents=[doc], issues=issues,
                       urls=doc.urls, invalid=doc.invalid, duplicates=doc.duplicates)


def _failed(path: Path, doc: DocumentResult, failure: Issue) -> CheckResult:
    """The result of a file that could not be read as a sitemap."""
    doc = replace(doc, outcome="failed", error=failure.message)
    return CheckResult(target=str(path), url=doc.url, outcome="failed", documents=[doc],
                       error_kind=failure.rule, error_message=failure.message,
                       issues=[failure])


def _not_reciprocal(found: Digest, url: str) -> list[Issue]:
    """hreflang-not-reciprocal within the file, as a check finds it over its target
    (monitor.check.reciprocity): only when the digest's balance says an alternate is
    unanswered."""
    from monitor.codec import entryset
    from monitor.read import alternates, validate

    if not found.balance or found.data is None:
        return []
    columns = entryset.unpack(found.data)
    locs, exts = columns.locs(), columns.column(4)
    held = alternates.Alternates()
    held.add(url, locs, exts)
    return [validate.issue(RuleId.HREFLANG_NOT_RECIPROCAL, Entry(locs[i], extensions=exts[i]), url)
            for i in sorted(held.unanswered().get(url, ()))]
