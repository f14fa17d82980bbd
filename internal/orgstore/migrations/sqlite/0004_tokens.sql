-- API tokens (docs/access.md), SQLite dialect. See docs/store.md.
--
-- One row per token, revoked ones kept (an audit record names the token
-- that wrote it). id is the token's public part (16 hex digits); hash is
-- SHA-256 of its secret part, the secret itself is never stored. role is
-- admin, org-admin or org-viewer; org is the organisation of a scoped role,
-- '' for admin. The times are Unix microseconds, 0 for never / not revoked.
-- The org is a plain id, not a reference to orgs: a token may be made for
-- an organisation before it exists.
CREATE TABLE tokens (
    id         TEXT    NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    role       TEXT    NOT NULL CHECK (role IN ('admin', 'org-admin', 'org-viewer')),
    org        TEXT    NOT NULL CHECK ((role = 'admin') = (org = '')),
    hash       BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    revoked_at INTEGER NOT NULL
) STRICT;

CREATE INDEX tokens_org ON tokens (org);

-- A counter every insert and revocation bumps in its transaction: a
-- verifier that keeps tokens in memory asks it every few seconds whether
-- anything changed (a revocation by the CLI or another orgmanager).
CREATE TABLE token_changes (
    id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    counter INTEGER NOT NULL
) STRICT;

INSERT INTO token_changes (id, counter) VALUES (1, 0);
