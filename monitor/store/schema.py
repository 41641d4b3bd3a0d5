"""SQLAlchemy tables: the single source of the schema and the target of Alembic migrations.

History model: ``entry_sets`` holds versions of each document's entries, one row a
version (``codec.entryset``). A version is current while ``removed_snapshot_id`` is NULL; the
URL set of a target at snapshot S is the union of the versions with ``first_snapshot_id <= S``
and (``removed_snapshot_id`` NULL or ``> S``). A document that did not change writes nothing.
``changes`` holds one row per change found by a re-check; a target's first check is its
baseline: its snapshot counts every entry as added and its entry sets list them.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    text,
)

# Named constraints so that migrations are reproducible on every backend (alembic naming.rst).
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# SQLite only autoincrements INTEGER PRIMARY KEY; PostgreSQL gets a BIGINT identity.
Id = BigInteger().with_variant(Integer(), "sqlite")
UTC = DateTime(timezone=True)

targets = Table(
    "targets",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("url", Text, nullable=False),
    Column("created_at", UTC, nullable=False),
    # Scheduling across replicas: a replica claims a due target with a lease. Set
    # when the row is made (NULL only in rows from before 0011), far ahead for a removed target.
    Column("next_due_at", UTC, nullable=True),
    Column("lease_owner", String(200), nullable=True),
    Column("lease_until", UTC, nullable=True),
    # Kept by each snapshot's transaction (store.sql.close_snapshot), so that the API does not
    # count a target's history at every call (migration 0005).
    Column("snapshot_count", BigInteger, nullable=False, server_default=text("0")),
    Column("change_count", BigInteger, nullable=False, server_default=text("0")),
    # The target's last re-check that compared lastmods (store.sql.close_snapshot):
    # entries with a valid lastmod before and after it, and those whose lastmod changed, which
    # the next re-check's lastmod-churn and the churn gauge read (migration 0009).
    Column("lastmod_compared", Integer, nullable=True),
    Column("lastmod_changed", Integer, nullable=True),
    # Claims read the due targets in this order (store.daemon.claim_due, migration 0011).
    Index("ix_targets_next_due_at", "next_due_at"),
)

snapshots = Table(
    "snapshots",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("target_id", Id, ForeignKey("targets.id", ondelete="CASCADE"), nullable=False),
    Column("started_at", UTC, nullable=False),
    Column("finished_at", UTC, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("urls", Integer, nullable=False, server_default=text("0")),
    Column("invalid", Integer, nullable=False, server_default=text("0")),
    Column("added", Integer, nullable=False, server_default=text("0")),
    Column("removed", Integer, nullable=False, server_default=text("0")),
    Column("changed", Integer, nullable=False, server_default=text("0")),
    Column("invalid_new", Integer, nullable=False, server_default=text("0")),
    Column("documents_ok", Integer, nullable=False, server_default=text("0")),
    Column("documents_failed", Integer, nullable=False, server_default=text("0")),
    Column("fetched_bytes", BigInteger, nullable=False, server_default=text("0")),
    Column("duration_seconds", Float, nullable=False, server_default=text("0")),
    # JSON object rule id -> count of the target's current issues after this check.
    Column("issue_counts", Text, nullable=False, server_default=text("'{}'")),
    Column("error_kind", String(64), nullable=True),
    Column("error_message", Text, nullable=True),
    # JSON list of the issues the check itself found and those of its indexes (each
    # {rule, message, loc, document}, or {rule, document, dropped: n} for those counted past the
    # ones kept); the issues of a document's entries are kept with them (monitor.codec.entryset).
    Column("issues", Text, nullable=False, server_default=text("'[]'")),
    # JSON object outcome -> how many of the check's documents had it: documents answered 304
    # or unchanged get no ``documents`` row (migration 0006).
    Column("document_counts", Text, nullable=False, server_default=text("'{}'")),
    # The bytes this snapshot's rows take, its entry-set versions aside (store.historysize),
    # written in its transaction: what retention's max_bytes sums (migration 0019).
    Column("history_bytes", BigInteger, nullable=False, server_default=text("0")),
    Index("ix_snapshots_target_id_id", "target_id", "id"),
)

# One row per document read or failed in a check: its fingerprint and outcome (O(documents),
# never O(URLs)); a document answered 304 or unchanged is only counted in its snapshot.
documents = Table(
    "documents",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("snapshot_id", Id, ForeignKey("snapshots.id", ondelete="CASCADE"), nullable=False),
    Column("url", Text, nullable=False),
    Column("parent_url", Text, nullable=True),
    Column("kind", String(16), nullable=True),
    Column("outcome", String(16), nullable=False),
    Column("http_status", Integer, nullable=True),
    Column("etag", Text, nullable=True),
    Column("last_modified", Text, nullable=True),
    Column("sha256", String(64), nullable=True),
    Column("urls", Integer, nullable=False, server_default=text("0")),
    Column("invalid", Integer, nullable=False, server_default=text("0")),
    Column("bytes", BigInteger, nullable=False, server_default=text("0")),
    Column("error", Text, nullable=True),
    Index("ix_documents_snapshot_id", "snapshot_id"),
)

# The current state of each document of a target: what conditional GET and skipping need.
target_documents = Table(
    "target_documents",
    metadata,
    Column("target_id", Id, ForeignKey("targets.id", ondelete="CASCADE"), primary_key=True),
    Column("url", Text, primary_key=True),
    Column("parent_url", Text, nullable=True),
    Column("kind", String(16), nullable=True),
    Column("etag", Text, nullable=True),
    Column("last_modified", Text, nullable=True),
    Column("sha256", String(64), nullable=True),
    Column("urls", Integer, nullable=False, server_default=text("0")),
    Column("invalid", Integer, nullable=False, server_default=text("0")),
    # JSON list of child URLs (an index), so a 304 of an index still knows its children.
    Column("children", Text, nullable=True),
    # JSON list of document-level issues ({rule, message, loc}) and JSON rule -> count.
    Column("issues", Text, nullable=False, server_default=text("'[]'")),
    Column("issue_counts", Text, nullable=False, server_default=text("'{}'")),
    Column("last_snapshot_id", Id, nullable=True),
    # Entries with a valid lastmod: what a re-check that finds the document unchanged
    # compares; NULL for a row stored before migration 0009.
    Column("lastmods", Integer, nullable=True),
)

# One row per version of a document's entries (monitor.codec.entryset: one compressed value).
entry_sets = Table(
    "entry_sets",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("target_id", Id, ForeignKey("targets.id", ondelete="CASCADE"), nullable=False),
    Column("document_url", Text, nullable=False),
    Column("first_snapshot_id", Id, nullable=False),
    Column("removed_snapshot_id", Id, nullable=True),
    Column("urls", Integer, nullable=False, server_default=text("0")),
    Column("invalid", Integer, nullable=False, server_default=text("0")),
    Column("data", LargeBinary, nullable=False),
    # Set when ``data`` is a delta against that full version (monitor.codec.entrydelta, migration
    # 0013), which then stays as long as this one does.
    Column("base_id", Id, nullable=True),
    Index("ix_entry_sets_target_id_document_url", "target_id", "document_url"),
)

changes = Table(
    "changes",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("snapshot_id", Id, ForeignKey("snapshots.id", ondelete="CASCADE"), nullable=False),
    Column("target_id", Id, ForeignKey("targets.id", ondelete="CASCADE"), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("loc", Text, nullable=False),
    Column("before", Text, nullable=True),
    Column("after", Text, nullable=True),
    # A removed URL's fate, once the URL checks looked: moved, gone, live, unknown.
    Column("reason", String(16), nullable=True),
    # The rule id the change is about (model.CHANGE_RULES), NULL for most changes.
    Column("rule", String(40), nullable=True),
    # A pack of ``changed`` changes (monitor.codec.changepacks, migration 0012): ``members`` changes
    # in one row, each its position in the entry-set version ``entry_set_id`` (its loc and
    # state after) and its state before, or none when ``before_set_id`` (the version that one
    # replaced) holds it at the same position; ``loc`` is the first member's, before/after NULL.
    Column("entry_set_id", Id, nullable=True),
    Column("before_set_id", Id, nullable=True),
    Column("members", Integer, nullable=True),
    Column("pack", LargeBinary, nullable=True),
    # A target's changes in the order they were recorded (its checks run one at a time), and
    # one kind's without reading the others: a listing reads the rows it lists (store.listing).
    Index("ix_changes_target_id_snapshot_id", "target_id", "snapshot_id", "id"),
    Index("ix_changes_target_id_kind", "target_id", "kind", "snapshot_id", "id"),
    Index("ix_changes_snapshot_id", "snapshot_id"),
    # One URL's changes in order (store.story), without reading the target's others.
    Index("ix_changes_target_id_loc", "target_id", "loc", "snapshot_id", "id"),
    # A target's packs (few rows), which a URL's story searches for its packed changes.
    Index("ix_changes_target_id_packs", "target_id", "id",
          sqlite_where=text("members IS NOT NULL"), postgresql_where=text("members IS NOT NULL")),
    # One rule's changes in order, without an entry for the (many) changes that have none.
    Index("ix_changes_target_id_rule", "target_id", "rule", "snapshot_id", "id",
          sqlite_where=text("rule IS NOT NULL"), postgresql_where=text("rule IS NOT NULL")),
    # The removals of one reason in order (a listing filtered or sorted by reason), without
    # reading the others: only a removal the URL checks looked at has one.
    Index("ix_changes_target_id_reason", "target_id", "reason", "snapshot_id", "id",
          sqlite_where=text("reason IS NOT NULL"),
          postgresql_where=text("reason IS NOT NULL")),
)

# Each loc a target's change rows are about, once (a pack's members aside: their locs are in
# the entry sets they point into). A search of the changes by a part of the loc reads these,
# a row per URL ever changed, not one per change, then the changes of the locs it found by the
# (target_id, loc) index of ``changes``. Written in the transaction that writes the change rows
# (store.changelocs); a loc whose last change row retention deleted is deleted with it.
change_locs = Table(
    "change_locs",
    metadata,
    Column("target_id", Id, ForeignKey("targets.id", ondelete="CASCADE"), primary_key=True),
    Column("loc", Text, primary_key=True),
)

# The versions of the robots.txt of a target's hosts: a row per version (the first
# fetch, then each change), the newest of a URL in force; its validators are rewritten in place
# so that the next fetch is conditional. ``text`` NULL: the host had no robots.txt (a 4xx).
robots_files = Table(
    "robots_files",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("target_id", Id, ForeignKey("targets.id", ondelete="CASCADE"), nullable=False),
    Column("url", Text, nullable=False),
    Column("snapshot_id", Id, nullable=True),  # the check that found this version
    Column("fetched_at", UTC, nullable=False),
    Column("http_status", Integer, nullable=True),
    Column("text", Text, nullable=True),
    Column("etag", Text, nullable=True),
    Column("last_modified", Text, nullable=True),
    Index("ix_robots_files_target_id_url_id", "target_id", "url", "id"),
)

# The health of each URL a target lists, one row per URL: its current state only.
# A check that finds the state unchanged rewrites this row; a transition also writes a
# ``health`` change. A URL the sitemap dropped keeps its row, ``listed`` false, until it has
# been checked once for its removal's ``reason`` (``removed_snapshot_id`` names that change).
url_states = Table(
    "url_states",
    metadata,
    Column("target_id", Id, ForeignKey("targets.id", ondelete="CASCADE"), primary_key=True),
    Column("loc", Text, primary_key=True),
    Column("listed", Boolean, nullable=False, server_default=text("true")),
    Column("state", String(16), nullable=False, server_default=text("'unknown'")),
    Column("rule", String(32), nullable=True),  # the state's rule id (url-redirect-loop...)
    Column("http_status", Integer, nullable=True),
    Column("final_url", Text, nullable=True),
    Column("hops", Integer, nullable=False, server_default=text("0")),
    # checks in a row that got no answer to trust (5xx three times is server-error)
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("detail", Text, nullable=True),
    Column("since", UTC, nullable=True),
    Column("checked_at", UTC, nullable=True),
    # when to check it next; NULL first (never checked, or dropped and awaiting its reason)
    Column("due_at", UTC, nullable=True),
    Column("removed_snapshot_id", Id, nullable=True),
    # The URL's place in the check order: a keyed hash of the loc (monitor.core.sampling), so the
    # URLs checked first are a random sample of the listing; below 0 for one checked ahead
    # of it (listed since), which stays out of the sample. NULL: not placed yet.
    Column("turn", BigInteger, nullable=True),
    # The validators of the URL's last answer, sent back on its re-check (a 304 keeps its state)
    Column("etag", Text, nullable=True),
    Column("last_modified", Text, nullable=True),
    Index("ix_url_states_target_id_due_at_turn", "target_id", "due_at", "turn"),
)

# What became of each URL a sitemap dropped, once the URL checks looked (its ``url_states`` row
# is gone by then): the answer of its removal's check (``answer``, JSON: state, HTTP status,
# final URL, hops, detail, checked_at) and the last state its checks found while it was listed
# (``last``, the same JSON with ``since``; NULL when it was never answered). One row per
# removal, deleted with its snapshot.
removal_answers = Table(
    "removal_answers",
    metadata,
    Column("target_id", Id, ForeignKey("targets.id", ondelete="CASCADE"), primary_key=True),
    Column("snapshot_id", Id, ForeignKey("snapshots.id", ondelete="CASCADE"),
           primary_key=True),
    Column("loc", Text, primary_key=True),
    Column("reason", String(16), nullable=False),
    Column("answer", Text, nullable=False),
    Column("last", Text, nullable=True),
    Index("ix_removal_answers_target_id_loc", "target_id", "loc", "snapshot_id"),
)

# The URL checks of each target across replicas: how far the URL states follow the target's
# snapshots, and the lease of the replica checking a batch of its URLs.
url_checks = Table(
    "url_checks",
    metadata,
    Column("target_id", Id, ForeignKey("targets.id", ondelete="CASCADE"), primary_key=True),
    Column("synced_snapshot_id", Id, nullable=True),
    Column("lease_owner", String(200), nullable=True),
    Column("lease_until", UTC, nullable=True),
    # When every URL the target listed had been checked once: before, the URL-health alerts
    # tell no count (migration 0016).
    Column("first_round_at", UTC, nullable=True),
    # The key of the check order's hash (monitor.core.sampling.turn), drawn at random once
    Column("sample_key", String(32), nullable=True),
)

# The durable outbox: written in the snapshot's transaction, delivered later.
notifications = Table(
    "notifications",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("snapshot_id", Id, ForeignKey("snapshots.id", ondelete="CASCADE"), nullable=True),
    Column("target_name", String(200), nullable=False),
    Column("rule", String(200), nullable=False),
    Column("channel", String(200), nullable=False),
    # firing | resolved | test
    Column("state", String(16), nullable=False),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("payload", Text, nullable=False),
    Column("created_at", UTC, nullable=False),
    # pending | delivered | failed
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", UTC, nullable=False),
    Column("lease_owner", String(200), nullable=True),
    Column("lease_until", UTC, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("delivered_at", UTC, nullable=True),
    Index("ix_notifications_status_next_attempt_at", "status", "next_attempt_at"),
)

# Which (target, rule) conditions are firing, so a rule notifies once and resolves once.
alert_states = Table(
    "alert_states",
    metadata,
    Column("target_name", String(200), primary_key=True),
    Column("rule", String(200), primary_key=True),
    Column("firing", Boolean, nullable=False),
    Column("since", UTC, nullable=False),
    Column("last_notification_id", Id, nullable=True),
)

# IndexNow submissions (monitor.indexnow.protocol): an outbox like ``notifications``, written in the
# transaction of the snapshot (or of the URL checks' triage of a removal) it comes from.
# ``urls`` is the request's URL list, newline-joined and deflated: up to 10,000 URLs a row.
indexnow_submissions = Table(
    "indexnow_submissions",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("target_name", String(200), nullable=False),
    Column("snapshot_id", Id, nullable=True),  # the change set's snapshot (kept after pruning)
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("origin", Text, nullable=False),  # scheme://host[:port]: one host a request
    Column("url_count", Integer, nullable=False),
    Column("kinds", Text, nullable=False, server_default=text("'{}'")),  # JSON kind -> URLs
    Column("urls", LargeBinary, nullable=False),
    Column("created_at", UTC, nullable=False),
    # pending | delivered | failed
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", UTC, nullable=False),
    Column("lease_owner", String(200), nullable=True),
    Column("lease_until", UTC, nullable=True),
    Column("http_status", Integer, nullable=True),  # the last answer's
    Column("last_error", Text, nullable=True),  # the last answer, or why there was none
    Column("attempted_at", UTC, nullable=True),
    Column("delivered_at", UTC, nullable=True),
    Index("ix_indexnow_submissions_status_next_attempt_at", "status", "next_attempt_at"),
    Index("ix_indexnow_submissions_target_name_id", "target_name", "id"),
)

# The last fetch of each host's IndexNow key file per target: verified daily, and read by each
# check, which reports ``indexnow-key-missing`` while it fails.
indexnow_keys = Table(
    "indexnow_keys",
    metadata,
    Column("target_name", String(200), primary_key=True),
    Column("origin", Text, primary_key=True),
    Column("location", Text, nullable=False),
    Column("key_digest", String(64), nullable=False),  # which key was verified (never the key)
    Column("checked_at", UTC, nullable=False),
    Column("ok", Boolean, nullable=False),
    Column("detail", Text, nullable=True),
)

# Each host's own not-found page, as the URL checks last asked for it (a path that cannot
# exist there, once a day): when it answered 2xx, the fingerprint of its main content, which a
# listed page's content matching makes a soft 404. Shared by every target on the host.
host_not_found = Table(
    "host_not_found",
    metadata,
    Column("origin", Text, primary_key=True),  # scheme://host[:port]
    Column("probed_at", UTC, nullable=False),
    Column("probe_url", Text, nullable=False),
    Column("final_url", Text, nullable=True),  # where its redirects ended
    Column("http_status", Integer, nullable=True),  # the final answer's, None when none came
    Column("fingerprint", LargeBinary, nullable=True),  # ``page.fingerprint`` when 2xx
)
