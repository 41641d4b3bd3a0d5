"""What Google's robots.txt parser decides for a URL and a user agent (pure).

Google publishes its parser (github.com/google/robotstxt) and, with it, a test suite that
defines every decision; ``tests/data/robots/google.json`` holds those expectations and this
module meets all of them. How a file is read, in Google's words made ours:

- bytes, not text: a leading UTF-8 byte order mark (or a part of one) is skipped; lines end at
  LF, CR or CRLF; a line past ``MAX_LINE_BYTES`` is cut there; ``#`` starts a comment;
- ``key: value``, or ``key value`` (two words, a forgotten colon); keys in any case and matched
  as prefixes, with Google's frequent typos (``useragent``, ``dissallow``, ``site-map`` ...);
- a group is one or more ``User-agent`` lines and the rules after them, up to the next
  ``User-agent`` line that follows a rule; ``Sitemap:`` and unknown lines do not end a group;
  rules before any ``User-agent`` line belong to no group;
- a ``User-agent`` value is cut to its product token (ASCII letters, ``-``, ``_``:
  ``Googlebot/2.1`` is ``Googlebot``, ``FOO BAR`` is ``FOO``) and compared whole, ignoring
  case, with the agent asked about (``Google`` is not ``Googlebot``); ``*`` (alone or before a
  space) is every other agent;
- every group that names the agent counts (their rules are merged) and the ``*`` groups then do
  not; within them the longest matching pattern decides, Allow wins a tie; a pattern matches a
  prefix of the URL's path and query, ``*`` is any run of bytes, a final ``$`` the end;
- patterns are compared as written, never decoded: bytes outside ASCII are %-escaped and
  existing %-escapes upper-cased, nothing else; the URL is taken as given (already escaped);
- Google's extra: an Allow that ends in ``/index.htm...`` also allows its directory (``/``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

__all__ = ["GOOGLEBOT", "MAX_BYTES", "MAX_LINE_BYTES", "Decision", "Line", "RobotsRules",
           "agent_token", "escape_pattern", "path_of", "product_token", "robots_url"]

GOOGLEBOT = "Googlebot"
MAX_BYTES = 512_000  # Google reads the first 500 KiB of a robots.txt, 500 x 1,000 bytes
# Google's line buffer holds 8 times a browser's longest URL (2,083 bytes), less its NUL.
MAX_LINE_BYTES = 2083 * 8 - 1

_BOM = b"\xef\xbb\xbf"
_BREAK = re.compile(rb"\r\n|\r|\n")
_WHITE = b" \t\n\v\f\r"  # what Google strips around keys and values (ASCII whitespace)
_TWO_WORDS = re.compile(rb"([^ \t]+)[ \t]+([^ \t]+)\Z")
_TOKEN = re.compile(rb"[A-Za-z_-]*")
_ESCAPE = re.compile(rb"%[0-9A-Fa-f]{2}|[\x80-\xff]")
_PATH_START = re.compile(rb"[/?;]")
# a lower-case scheme and a host that ends where the path, query or fragment starts
_ORIGIN = re.compile(r"https?://[^/?#\\\s]+(?=[/?#]|\Z)")
_USER_AGENT = (b"user-agent", b"useragent", b"user agent")
_DISALLOW = (b"disallow", b"dissallow", b"dissalow", b"disalow", b"diasllow", b"disallaw")


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a robots.txt: its number (from 1) and its text as written."""

    number: int
    text: str


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether an agent may crawl a URL, and why: the line that decided (None when no rule
    matched) and the ``User-agent`` lines of the group that applied (empty when none did)."""

    allowed: bool
    line: Line | None
    group: tuple[Line, ...]


@dataclass(frozen=True, slots=True)
class _Rule:
    line: Line
    allow: bool
    pattern: bytes
    parts: tuple[bytes, ...]  # the pattern split at ``*``, without a final ``$``
    anchored: bool  # the pattern ends in ``$``
    group: int


@dataclass(slots=True)
class _Group:
    agents: list[Line]
    tokens: set[bytes]  # product tokens, lower case
    everyone: bool  # a ``*`` line
    rules: list[_Rule]


class RobotsRules:
    """One host's robots.txt, parsed once. ``None`` (no robots.txt, or one that did not answer
    2xx) allows everything.

    >>> rules = RobotsRules("User-agent: *\\nDisallow: /private\\n")
    >>> rules.allows("https://shop.example/private/a"), rules.allows("https://shop.example/")
    (False, True)
    """

    def __init__(self, text: str | None) -> None:
        self.text = text
        self._groups = [] if text is None else _groups(text.encode("utf-8", "surrogateescape"))
        self._chosen: dict[bytes, tuple[bool, tuple[_Rule, ...], tuple[int, ...]]] = {}

    def allows(self, url: str, agent: str = GOOGLEBOT) -> bool:
        """Whether ``agent`` may crawl ``url`` (Google's decision: ``decide`` without the
        why, for the URL checks' hundreds of thousands of URLs)."""
        rules = self._rules_for(agent)[1]
        if not rules:
            return True
        path = path_of(url)
        allow = disallow = -1
        for rule in rules:
            priority = _priority(rule, path)
            if rule.allow:
                allow = max(allow, priority)
            else:
                disallow = max(disallow, priority)
        # a matched empty pattern (length 0) decides nothing; Allow wins a tie
        return disallow <= 0 or disallow <= allow

    def decide(self, url: str, agent: str = GOOGLEBOT) -> Decision:
        """Google's decision for ``agent`` and ``url``, with the line and group behind it."""
        named, rules, groups = self._rules_for(agent)
        path = path_of(url)
        allow: tuple[int, _Rule] | None = None
        disallow: tuple[int, _Rule] | None = None
        for rule in rules:
            priority = _priority(rule, path)
            if priority < 0:
                continue
            # the first line of a length decides
            if rule.allow:
                if allow is None or allow[0] < priority:
                    allow = (priority, rule)
            elif disallow is None or disallow[0] < priority:
                disallow = (priority, rule)
        winner = disallow if disallow is not None and (allow is None or disallow[0] > allow[0]) \
            else allow
        # A matched empty pattern (length 0) decides nothing: it allows.
        allowed = winner is None or winner[1].allow or winner[0] == 0
        if winner is not None:
            return Decision(allowed, winner[1].line, tuple(self._groups[winner[1].group].agents))
        agents = tuple(line for index in groups for line in self._groups[index].agents)
        return Decision(allowed, None, agents if named or groups else ())

    def may_disallow(self) -> bool:
        """Whether any group has a ``Disallow`` with a path (else every agent may crawl
        everything)."""
        return any(not rule.allow and rule.pattern for group in self._groups
                   for rule in group.rules)

    def has_group(self, agent: str) -> bool:
        """Whether a ``User-agent`` line names ``agent`` (its product token, any case)."""
        return self._rules_for(agent)[0]

    def _rules_for(self, agent: str) -> tuple[bool, tuple[_Rule, ...], tuple[int, ...]]:
        """The rules that apply to ``agent``: those of the groups that name it, else those of
        the ``*`` groups; whether any group names it; the groups that apply."""
        key = agent.encode("utf-8", "surrogateescape").lower()
        chosen = self._chosen.get(key)
        if chosen is None:
            indexes = tuple(i for i, g in enumerate(self._groups) if key in g.tokens)
            named = bool(indexes)
            if not named:
                indexes = tuple(i for i, g in enumerate(self._groups) if g.everyone)
            rules = tuple(rule for i in indexes for rule in self._groups[i].rules)
            chosen = self._chosen[key] = (named, rules, indexes)
        return chosen


def _groups(data: bytes) -> list[_Group]:
    """The groups of a robots.txt, each with its ``User-agent`` lines and rules."""
    skip = 0
    while skip < len(_BOM) and skip < len(data) and data[skip] == _BOM[skip]:
        skip += 1
    groups: list[_Group] = []
    current: _Group | None = None
    for number, raw in enumerate(_BREAK.split(data[skip:]), 1):
        raw = raw[:MAX_LINE_BYTES]
        found = _directive(raw)
        if found is None:
            continue
        key, value = found
        line = Line(number, raw.decode("utf-8", "replace").strip())
        if key.startswith(_USER_AGENT):
            if current is None or current.rules:
                current = _Group([], set(), False, [])
                groups.append(current)
            current.agents.append(line)
            if value[:1] == b"*" and (len(value) == 1 or value[1:2] in b" \t\n\v\f\r"):
                current.everyone = True
            else:
                current.tokens.add(product_token(value).lower())
        elif key.startswith(b"allow") or key.startswith(_DISALLOW):
            if current is None:
                continue  # a rule outside any group is ignored
            allow = key.startswith(b"allow")
            pattern = escape_pattern(value)
            anchored = pattern.endswith(b"$")
            parts = tuple((pattern[:-1] if anchored else pattern).split(b"*"))
            current.rules.append(_Rule(line, allow, pattern, parts, anchored, len(groups) - 1))
    return groups


def _directive(raw: bytes) -> tuple[bytes, bytes] | None:
    """The key (lower case) and value of a line, or None (empty, a comment, no separator)."""
    text = raw.split(b"#", 1)[0].strip(_WHITE)
    if not text:
        return None
    key, colon, value = text.partition(b":")
    if not colon:
        # Google accepts whitespace for a forgotten colon, between exactly two words.
        two = _TWO_WORDS.match(text)
        if two is None:
            return None
        key, value = two.group(1), two.group(2)
    key = key.strip(_WHITE)
    if not key:
        return None
    return key.lower(), value.strip(_WHITE)


def _priority(rule: _Rule, path: bytes) -> int:
    """The length of ``rule``'s pattern when it matches ``path``, else -1."""
    if _matches(rule.parts, rule.anchored, path):
        return len(rule.pattern)
    if rule.allow:
        # Google's extra: "Allow: /dir/index.html" allows "/dir/" too.
        slash = rule.pattern.rfind(b"/")
        if slash >= 0 and rule.pattern[slash:].startswith(b"/index.htm"):
            directory = rule.pattern[:slash + 1]
            if _matches(tuple(directory.split(b"*")), True, path):
                return len(directory) + 1  # the length of "/dir/$"
    return -1


def _matches(parts: tuple[bytes, ...], anchored: bool, path: bytes) -> bool:
    """Whether the pattern (``parts`` between its ``*``s) matches a prefix of ``path``, or
    all of it when ``anchored``. Each part is taken at its first place after the last: a
    part found later leaves less room for the rest, never more."""
    first = parts[0]
    if len(parts) == 1:
        return path == first if anchored else path.startswith(first)
    if not path.startswith(first):
        return False
    at = len(first)
    for part in parts[1:-1]:
        found = path.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    last = parts[-1]
    if anchored:
        return len(path) - len(last) >= at and path.endswith(last)
    return path.find(last, at) >= 0


def escape_pattern(value: bytes) -> bytes:
    """A rule's pattern as Google compares it: bytes outside ASCII %-escaped, the hex digits
    of existing escapes upper-cased, everything else as written (never decoded)."""
    return _ESCAPE.sub(lambda m: m.group(0).upper() if len(m.group(0)) == 3
                       else b"%%%02X" % m.group(0)[0], value)


def agent_token(user_agent: str) -> str:
    """The product token of a ``User-Agent`` header (``sitemap-monitor/1.0 (+url)`` is
    ``sitemap-monitor``): what a crawler asks robots.txt as, since a group names it so."""
    return product_token(user_agent.strip().encode("utf-8", "surrogateescape")).decode()


def product_token(value: bytes) -> bytes:
    """The product token a ``User-agent`` value starts with (ASCII letters, ``-``, ``_``)."""
    found = _TOKEN.match(value)
    return b"" if found is None else found.group(0)


def path_of(url: str) -> bytes:
    """The part of ``url`` robots.txt rules are matched against: the path, parameters and
    query, without the fragment, ``/`` when there is none (Google's reading of a URL, which
    takes it already escaped: nothing is decoded or encoded)."""
    raw = url.encode("utf-8", "surrogateescape")
    start = 2 if raw.startswith(b"//") else 0
    early = _PATH_START.search(raw, start)
    scheme = raw.find(b"://", start)
    # A "://" after the first "/", "?" or ";" is part of the path, not a scheme's end.
    begin = start if scheme < 0 or (early is not None and early.start() < scheme) \
        else scheme + 3
    found = _PATH_START.search(raw, begin)
    if found is None:
        return b"/"
    path_start = found.start()
    fragment = raw.find(b"#", start)
    if 0 <= fragment < path_start:
        return b"/"
    path = raw[path_start:fragment if fragment >= 0 else len(raw)]
    return path if path.startswith(b"/") else b"/" + path


def robots_url(url: str) -> str:
    """The robots.txt that governs ``url``."""
    usual = _ORIGIN.match(url)  # most URLs: no need to split the whole of them
    if usual is not None:
        return usual.group(0) + "/robots.txt"
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/robots.txt", "", ""))
