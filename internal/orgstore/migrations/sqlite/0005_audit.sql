-- The audit record (docs/store.md, Audit), SQLite dialect.
--
-- One row per write through a management API: who (the token's id and
-- name, never its secret, and its role), what (method, path with its query),
-- on which organisation and to which version, the request id and the
-- status. org is the organisation id as text, not a reference to orgs:
-- the record must outlive the organisation it tells about. time is unix
-- microseconds (UTC).
--
-- AUTOINCREMENT: an id is never reused, even after pruning removed the
-- newest rows, so a cursor (the id of the last record a reader saw) never
-- names a different record later.
CREATE TABLE audit (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    time        INTEGER NOT NULL,
    token_id    TEXT    NOT NULL DEFAULT '',
    token_name  TEXT    NOT NULL DEFAULT '',
    role        TEXT    NOT NULL DEFAULT '',
    method      TEXT    NOT NULL,
    path        TEXT    NOT NULL,
    org         TEXT    NOT NULL DEFAULT '',
    org_version INTEGER NOT NULL DEFAULT 0,
    request_id  TEXT    NOT NULL DEFAULT '',
    status      INTEGER NOT NULL
) STRICT;

-- The two reads, newest first: every record (and the retention's prune,
-- oldest first), and one organisation's.
CREATE INDEX audit_by_time ON audit (time, id);
CREATE INDEX audit_by_org ON audit (org, time, id);
