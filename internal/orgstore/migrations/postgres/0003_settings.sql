-- Settings documents (docs/policy.md, the settings), PostgreSQL dialect. See docs/store.md.
--
-- One row per organisation and scope. scope is the layer, in layer order:
-- 1 org (value ''), 2 profile (value: the profile number in decimal),
-- 3 location, 4 username, 5 deviceid (value: the attribute as overrides
-- carry it). doc is the document's canonical JSON (settings.Document.String()),
-- which settings.Parse reads back (TEXT, not jsonb: jsonb would reorder the
-- keys). selects_profile is the document's own "profile" field (NULL when
-- unset), kept beside it so that the profile a subscriber's layers select is
-- found without parsing them.
CREATE TABLE settings (
    org_pk          BIGINT   NOT NULL REFERENCES orgs (pk) ON DELETE CASCADE,
    scope           SMALLINT NOT NULL CHECK (scope BETWEEN 1 AND 5),
    -- "C" collation: byte order, the same as SQLite's.
    value           TEXT COLLATE "C" NOT NULL CHECK ((scope = 1) = (value = '')),
    selects_profile INTEGER,
    doc             TEXT     NOT NULL,
    PRIMARY KEY (org_pk, scope, value)
);

-- The global layer: one document outside every organisation, with a version
-- counter of its own (bumped by every put and delete; kept when the document
-- is deleted, doc is then NULL). The one row always exists.
CREATE TABLE global_settings (
    id              SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    version         BIGINT   NOT NULL,
    selects_profile INTEGER,
    doc             TEXT
);

INSERT INTO global_settings (id, version, selects_profile, doc) VALUES (1, 0, NULL, NULL);
