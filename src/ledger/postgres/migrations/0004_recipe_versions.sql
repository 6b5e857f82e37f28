-- Version 4: each document records the version of the recipe that made its chunks (the
-- chunker's, and later its format extractor's), as the SQLite ledger does from its version 8.
-- Documents from before get 0, older than any recipe: the next writer reads their files again
-- and publishes them chunked by its recipe, and every mirror copies the version with them.
ALTER TABLE documents ADD COLUMN recipe_version bigint NOT NULL DEFAULT 0;
