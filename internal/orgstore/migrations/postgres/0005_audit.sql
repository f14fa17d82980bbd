-- The audit record (docs/store.md, Audit), PostgreSQL dialect.
--
-- One row per write through a management API: who (the token's id and
-- name, never its secret, and its role), what (method, path with its query),
-- on which organisation and to which version, the request id and the
-- status. org is the organisation id as text, not a reference to orgs:
-- the record must outlive the organisation it tells about. time is unix
-- microseconds (UTC).
CREATE TABLE audit (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    time        BIGINT   NOT NULL,
    token_id    TEXT     NOT NULL DEFAULT '',
    token_name  TEXT     NOT NULL DEFAULT '',
    role        TEXT     NOT NULL DEFAULT '',
    method      TEXT     NOT NULL,
    path        TEXT     NOT NULL,
    -- "C" collation: byte order, the same as SQLite's.
    org         TEXT COLLATE "C" NOT NULL DEFAULT '',
    org_version BIGINT   NOT NULL DEFAULT 0,
    request_id  TEXT     NOT NULL DEFAULT '',
    status      INTEGER  NOT NULL
);

-- The two reads, newest first: every record (and the retention's prune,
-- oldest first), and one organisation's.
CREATE INDEX audit_by_time ON audit (time, id);
CREATE INDEX audit_by_org ON audit (org, time, id);
