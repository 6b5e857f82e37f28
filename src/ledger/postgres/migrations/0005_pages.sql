-- Version 5: a chunk of a format with pages (PDF) records its first and last page; its lines
-- are then lines of those pages' text. Rows of other formats, and every row from before, have
-- none. As the SQLite ledger does from its version 9.
ALTER TABLE doc_chunks ADD COLUMN page_start bigint;
ALTER TABLE doc_chunks ADD COLUMN page_end bigint;
