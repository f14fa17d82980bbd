-- Deleted organisations whose sessions the IP Mapper may still hold: written
-- in the delete's transaction, removed by the deployer once its clean of the
-- organisation succeeded (or when the organisation is created again). A
-- restart in between no longer forgets the clean. See docs/store.md.
CREATE TABLE deleted_orgs (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    revision   BIGINT NOT NULL,
    deleted_at BIGINT NOT NULL
);
