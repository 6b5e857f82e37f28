-- Version 3: every log position gets a token of its own, so a mirror can tell that the position
-- it holds is still the one the ledger has (a ledger restored from a backup reuses positions).
ALTER TABLE ledger_meta ADD COLUMN log_token text NOT NULL DEFAULT '';
CREATE TABLE log_tokens (
    seq   bigint PRIMARY KEY,
    token text NOT NULL
);
