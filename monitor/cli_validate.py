"""``validate FILE``: one sitemap file on disk, read and validated as a check reads a document,
with the rules a check judges over a whole target (news-too-many, hreflang-not-reciprocal)
judged within the file."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from monitor.config import Config
from monitor.errors import ConfigError
from monitor.model import CheckResult, Issue
from monitor.read.validate import ValidatedDocument
from monitor.rules import rule_id

__all__ = ["extension_issues", "validate_file"]


def validate_file(path: Path, cfg: Config) -> CheckResult:
    """``validate FILE``: one sitemap file read, inflated and validated as a check would; nothing
    stored."""
    from monitor.errors import FetchError
    from monitor.model import DocumentResult
    from monitor.net import inflate
    from monitor.read import parse, validate

    url = path.resolve().as_uri()
    d = cfg.defaults
    parser = parse.DocumentParser(url, max_bytes=d.max_bytes, max_urls=d.max_urls,
                                  max_children=d.max_children)
    doc = DocumentResult(url=url, outcome="ok")
    try:
        # Bounded while it inflates, as a fetch is: a gzip bomb stops at max_bytes.
        for chunk in inflate.read_file(str(path), url, d.max_bytes):
            doc.bytes += len(chunk)
            parser.feed(chunk)
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    except FetchError as exc:
        failure: Issue | None = Issue(rule_id(exc.kind), exc.message, document=url)
    else:
        failure = None
    parsed = parser.close()
    failure = failure or parsed.failure
    doc.kind = parsed.kind
    if failure is not None:
        doc.outcome, doc.error = "failed", failure.message
        return CheckResult(target=str(path), url=url, outcome="failed", documents=[doc],
                           error_kind=failure.rule, error_message=failure.message,
                           issues=[failure])
    checked = validate.validate_document(parsed.entries, url, now=datetime.now(UTC))
    issues = [*parsed.issues,
              *filter(None, (validate.child_issue(c, url) for c in parsed.children)),
              *checked.issues, *extension_issues(checked, url)]
    doc.urls = sum(1 for s in checked.entries.values() if s.valid)
    doc.invalid = checked.invalid + parsed.unkeyed_invalid
    doc.duplicates = checked.duplicates
    return CheckResult(target=str(path), url=url, outcome="ok", documents=[doc], issues=issues,
                       urls=doc.urls, invalid=doc.invalid, duplicates=doc.duplicates)


def extension_issues(checked: ValidatedDocument, url: str) -> list[Issue]:
    """What a check finds over a whole target, within one file: news-too-many and
    hreflang-not-reciprocal."""
    from monitor.model import Entry
    from monitor.read import extensions, validate

    locs = list(checked.entries)
    exts = [state.extensions for state in checked.entries.values()]
    found = []
    news = extensions.news_count(exts)
    if news > extensions.MAX_NEWS:
        found.append(Issue("news-too-many", f"{news} news:news tags; the limit is "
                           f"{extensions.MAX_NEWS} a document", document=url))
    if extensions.balance(locs, exts):
        held = extensions.Alternates()
        held.add(url, locs, exts)
        found += [validate.issue("hreflang-not-reciprocal", Entry(locs[i], extensions=exts[i]),
                                 url) for i in sorted(held.unanswered().get(url, ()))]
    return found
