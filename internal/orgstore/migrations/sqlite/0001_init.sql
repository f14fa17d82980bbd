-- svc-pf organisation store, SQLite dialect. See docs/store.md.
-- Timestamps are unix microseconds (UTC). CIDRs are binary keys:
-- family (4|6) + network address + prefix length, ordered byte-wise.

CREATE TABLE orgs (
    pk         INTEGER PRIMARY KEY,
    id         TEXT    NOT NULL UNIQUE,
    version    INTEGER NOT NULL,
    revision   INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

-- Prefixes never overlap across organisations, so a CIDR has at most one
-- owner: it is the primary key on its own, which also makes the global
-- overlap check an index lookup.
CREATE TABLE prefixes (
    cidr   BLOB    NOT NULL PRIMARY KEY CHECK (length(cidr) IN (6, 18)),
    org_pk INTEGER NOT NULL REFERENCES orgs (pk) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;

CREATE INDEX prefixes_by_org ON prefixes (org_pk, cidr);

-- WITHOUT ROWID: rows live in the primary-key B-tree, so reading an
-- organisation's overrides in CIDR order is one sequential range scan.
CREATE TABLE overrides (
    org_pk   INTEGER NOT NULL REFERENCES orgs (pk) ON DELETE CASCADE,
    cidr     BLOB    NOT NULL CHECK (length(cidr) IN (6, 18)),
    username TEXT    NOT NULL DEFAULT '',
    deviceid TEXT    NOT NULL DEFAULT '',
    location TEXT    NOT NULL DEFAULT '',
    trace_id TEXT    NOT NULL DEFAULT '',
    ctime    INTEGER NOT NULL,
    mtime    INTEGER NOT NULL,
    meta     TEXT,
    PRIMARY KEY (org_pk, cidr)
) STRICT, WITHOUT ROWID;
