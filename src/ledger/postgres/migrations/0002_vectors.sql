-- Version 2: embeddings, shared by every host, so each passage is embedded once whichever host
-- runs the model. `vector_seq` moves with every published page of vectors; a mirror copies the
-- vectors of the pages after its own position.
ALTER TABLE ledger_meta ADD COLUMN vector_seq bigint NOT NULL DEFAULT 0;

CREATE TABLE embedding_models (
    fingerprint  bytea PRIMARY KEY,
    description  text NOT NULL,
    dims         bigint NOT NULL,
    first_seen   bigint NOT NULL,
    active_since bigint,
    complete_at  bigint
);

CREATE TABLE vectors (
    model    bytea NOT NULL,
    chunk_id bytea NOT NULL,
    vector   bytea NOT NULL,
    seq      bigint NOT NULL,
    PRIMARY KEY (model, chunk_id)
);
CREATE INDEX vectors_by_seq ON vectors (seq);
