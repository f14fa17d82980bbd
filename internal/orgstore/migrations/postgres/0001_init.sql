-- svc-pf organisation store, PostgreSQL dialect. See docs/store.md.
-- Timestamps are unix microseconds (UTC). CIDRs are binary keys:
-- family (4|6) + network address + prefix length, ordered byte-wise.

CREATE TABLE orgs (
    pk         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- "C" collation: byte order, the same as SQLite's, whatever the
    -- database's locale.
    id         TEXT COLLATE "C" NOT NULL UNIQUE,
    version    BIGINT NOT NULL,
    revision   BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- Prefixes never overlap across organisations, so a CIDR has at most one
-- owner: it is the primary key on its own, which also makes the global
-- overlap check an index lookup.
CREATE TABLE prefixes (
    cidr   BYTEA  NOT NULL PRIMARY KEY CHECK (length(cidr) IN (6, 18)),
    org_pk BIGINT NOT NULL REFERENCES orgs (pk) ON DELETE CASCADE
);

CREATE INDEX prefixes_by_org ON prefixes (org_pk, cidr);

CREATE TABLE overrides (
    org_pk   BIGINT NOT NULL REFERENCES orgs (pk) ON DELETE CASCADE,
    cidr     BYTEA  NOT NULL CHECK (length(cidr) IN (6, 18)),
    username TEXT   NOT NULL DEFAULT '',
    deviceid TEXT   NOT NULL DEFAULT '',
    location TEXT   NOT NULL DEFAULT '',
    trace_id TEXT   NOT NULL DEFAULT '',
    ctime    BIGINT NOT NULL,
    mtime    BIGINT NOT NULL,
    meta     TEXT,
    PRIMARY KEY (org_pk, cidr)
);
