-- hermes-agent schema, version 12: fact vectors, for recall by meaning (memory.embeddings).
-- One row per fact and embedding model (with the dimensions it answered): a model change adds
-- the new vectors beside the old ones, which are deleted only once replaced. `vector` is the
-- little-endian f32 values; empty when the server refused the fact even cut short (so it is
-- not asked again for that model). `seq` numbers rows in the order written (writers hold the
-- facts table's lock, so that is also the commit order), so each daemon's in-memory copy
-- loads only what is new.
CREATE TABLE fact_vectors (
    seq        BIGSERIAL PRIMARY KEY,
    fact_id    TEXT NOT NULL,
    model      TEXT NOT NULL,
    dims       BIGINT NOT NULL,
    vector     BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    UNIQUE (fact_id, model, dims)
);
CREATE INDEX fact_vectors_by_model ON fact_vectors (model, dims, seq);
-- The embedding worker walks the facts in the order they were made, from where it got to.
CREATE INDEX facts_by_age ON facts (created_at, id);
