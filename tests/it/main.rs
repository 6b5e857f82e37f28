//! Integration tests: the real `groundidx` binary on real folders.
//!
//! Table of contents, one file per promise:
//! - `support`: the harness, one of each: the test environment (a temp copy of `sample_docs/`, a
//!   store, a runner), child processes and signals, the seeded RNG, `groundidx mcp` and
//!   `groundidx serve` as child processes with their clients, ledger row counts and locks, the
//!   PostgreSQL test database, a real OpenAI-compatible embeddings server on loopback that counts
//!   every passage it is given (vectors from the local model, or from a hash of the words).
//! - `reingest`: invariant 1, a re-run on unchanged documents writes nothing.
//! - `edits`: edits, renames, deletions and shared passages write only what changed.
//! - `crash`: invariant 2, an abort at every named crash point heals on the next run.
//! - `kill`: invariant 2 again, SIGKILL at random moments: small incremental ingests (inside
//!   Tantivy's commits and merges too) and a real corpus.
//! - `heal`: a damaged, missing or outdated index (another schema, another analyzer version) is
//!   rebuilt from the ledger and swapped in; readers name the index, ledger-only commands keep
//!   working.
//! - `signals`: SIGINT and SIGTERM end `ingest` and `ingest --watch` at a safe point, 130 / 143.
//! - `serve_signals`: SIGINT and SIGTERM during `serve --reindex`'s runs end it at a safe point.
//! - `identifiers`: numbers, identifiers, file names, titles and identifier fields find their
//!   own document first; renames re-index; `id_fields` takes effect at `rebuild`.
//! - `search`: invariant 3, no passage twice; filters, snippets and the JSON contract.
//! - `served_text`: `search`, `get_chunk` and `export` serve a passage byte for byte as a file
//!   holds it now (indentation fixes, whitespace variants, deletions); a store of older chunk
//!   IDs is chunked again by its next ingest.
//! - `embedding`: every passage embedded once (no-op, edit, rename, shared passage, kill during
//!   embedding, a new model), the vector index checked by `verify` and made by `rebuild`,
//!   filters in every mode, an unreachable or failing model.
//! - `embed_kill`: SIGKILL at random moments (seeded) during embedding runs and model switches
//!   heals to one vector per chunk, each passage embedded once but for the pages kills lost.
//! - `hostile_servers`: embeddings servers answering NaN, infinities, wrong or duplicate indexes,
//!   too many or changing dimensions, non-UTF-8, redirect loops, 429, or dying after the probe.
//! - `hostile_vectors`: a ledger vector of the wrong length, a foreign, truncated or empty
//!   vector index, a model answering queries in other dimensions: named, and healed by `rebuild`.
//! - `verify`: invariant 4, verify passes on a healthy store and names every difference.
//! - `verify_race`: `verify` beside a committing writer reports a lag at most, never a false
//!   difference.
//! - `malformed`: invariant 6, hostile files warn and hurt no other document.
//! - `hostile_input`: front matter and Markdown built to exhaust memory cost at most their size.
//! - `names`: file names and document text reach terminals and text logs escaped.
//! - `deletion`: deletions wait for a clean walk; the mass-delete guard; roots stay apart.
//! - `lock`: one writer at a time; readers never wait; a waiting run walks only once it holds
//!   the lock.
//! - `cli`: exit codes, usage errors, help, store location and schema version.
//! - `ops`: the README's crontab line, `status --max-age`, systemd units, completions, man page.
//! - `config`: `groundidx.toml`, precedence of flags, environment, file and defaults; bad keys.
//! - `pipes`: a closed stdout pipe ends a command quietly with success.
//! - `prompt`: the progress bar on a terminal only, colour and `NO_COLOR`, text and JSON logs.
//! - `tidy`: every source file documents itself and appears in ARCHITECTURE.md.
//! - `agent_keys`: the keyed agent path through the library with a fake clock: concurrency,
//!   retention and gc, the quota.
//! - `agent_mcp`: the agent tool over MCP stdio: keys, replays, mismatches, crashes, failures,
//!   the quota and the MCP surface.
//! - `agent_http`: the agent tool over HTTP (JSON API and `/mcp`): header keys, replays, the
//!   quota headers, Origin/Host/auth security, and reads during an ingest.
//! - `agent_cancel`: `notifications/cancelled` before a keyed call's commit abandons it, after
//!   it the call stands (C6), held at each side by a pause point.
//! - `agent_errors`: one tool-error shape per transport that fits the output schema,
//!   problem types that lead to a page, one `top_k` range, JSON-RPC errors for bad stdio lines.
//! - `clients`: the official TypeScript and Python MCP SDK clients against both servers: every
//!   tool error's message shown, identical results in each protocol revision.
//! - `relevance_floor`: every embedded query's hits carry their `similarity`; `min_score`
//!   keeps exactly the hits at or above it, says when it cannot apply, and binds its pages.
//! - `semantic`: search by meaning with the real local model; the same model behind the
//!   embeddings API ranks the same.
//! - `search_generation`: an answer, its audit row and its replay name the commit searched.
//! - `agent_concurrency`: concurrent clients during ingests get whole generations, never older.
//! - `group_commit`: keyed calls from concurrent clients, committed together, with the server
//!   killed at random moments: every answered call is recorded once, no call half-recorded,
//!   and a retry of each unanswered one leaves it recorded once.
//! - `two_roots`: the same relative path under two roots is told apart by its root everywhere.
//! - `agent_cursor`: P6, `search_docs` pages with `cursor` from one generation; bad cursors refused.
//! - `python_package`: `contrib/python`'s pytest suite (the JSON API client, the LangChain and
//!   LlamaIndex retrievers) against a real `groundidx serve`.
//! - `read_tools`: `read_document` around a hit, by lines and pages, pinned to a generation, in
//!   parts; `list_documents` filtered and paged; the documents as MCP resources; keyed reads.
//! - `agent_metrics`: `/metrics` stays valid and bounded whatever tool names requests carry.
//! - `shared_ledger`: the shared PostgreSQL ledger: migrations, ingest under the lease from
//!   several hosts, replicas equal to a clean ingest, kills at every shared crash point, the
//!   lease's fence, one key, one audit row and one rate limit across hosts.
//! - `ledger_schemas`: the SQLite and PostgreSQL ledgers hold the same columns in the tables
//!   both hold, but for the differences named there.
//! - `compressed_text`: chunk text stored compressed (one dictionary per store, trained with
//!   the rows that first use it) is served byte for byte; plain rows of older stores stay
//!   readable; a killed first batch leaves neither; a lost dictionary is refused.
//! - `replica_writes`: no command writes a replica's ledger but through its shared ledger
//!   (`rebuild` with a damaged vector, `embed` without `--ledger`): no page of vectors skipped.
//! - `agent_semantic`: `search_docs` by meaning over MCP and HTTP: `mode`, coverage, the model
//!   loaded once, replays that embed nothing, pages that keep their mode, refusals.
//! - `agent_run_keys`: every `runId`/`step` pair is a key of its own, never a direct key.
//! - `slow_clients`: slow, silent and body-less sockets are closed within their timeouts, and
//!   a flood of them leaves `/health` and authenticated clients served (loopback, bounded).
//! - `cors`: CORS preflights over TCP from allowed and refused origins, without a token, and
//!   the headers a browser app reads on the answers that follow.
//! - `json_edges`: `top_k: 3.0` is 3 and keeps its key, numbers out of range answered with
//!   their id, problem+json for unknown routes and methods, client mistakes logged readably.
//! - `batches`: JSON-RPC batches over stdio and HTTP at protocol 2025-03-26, refused after.
//! - `abuse`: hostile bytes, bodies and arguments on the agent path get clear errors, write
//!   nothing, never leak a file from outside the ingested folders, and the server keeps serving.
//! - `faults`: a full disk (the first embedding's too), an unwritable or read-only store and a
//!   locked ledger fail clearly, and the store heals once the fault is gone; every read command
//!   and the agent path read a store on a read-only mount, its write-ahead log included.
//! - `hostile_tree`: a tree that changes under a run (folders swapped for links between the
//!   walk and the read, the root swapped before or during the walk) or misbehaves (late NUL bytes, an
//!   unreadable root, the year 2400).
//! - `hostile_names`: file names and text with control characters print as one harmless line.
//! - `stat_cache`: what the stat cache may conclude: ctime, reused inodes, the schema upgrade.
//! - `foreign_store`: another program's SQLite file as the ledger is refused and left untouched.
//! - `embed_local`: the local embedding model: vectors as sentence-transformers makes them, the
//!   folder's settings, the fingerprint and stat key, and an error for each unusable folder:
//!   one message whatever `RUST_BACKTRACE` says, after a bounded read of a hostile one.
//! - `model_identity`: a remote model is named by what it answers to a probe, so a model
//!   updated or resized under the same name is a new model, never mixed with the old, never
//!   stored damaged or re-embedded in a loop, while float noise in its answers is the same
//!   model; a running server follows the active model.
//! - `recorded_model`: a store keeps its embedding model: a relative `--embed-model` found from
//!   any folder, plain `ingest` and `embed` use the recorded model, or fail clearly when its
//!   folder is gone, the lexical part kept.
//! - `small_chunks`: a fragment too small to stand alone is served with its neighbour, a file
//!   of a heading alone is found by its heading and its file name, and a store an older
//!   chunking recipe made is chunked again by its next ingest, once.
//! - `semantic_status`: every answer says the mode it used and why not hybrid at full coverage,
//!   one reason code per cause (`model_missing`, `model_changed`, `model_unreadable`,
//!   `embedding_incomplete`) on `search --json` (one warning line), MCP, HTTP, `/health` and
//!   `status --json`; a server's `/health` follows the active model.
//! - `readme_setups`: README's first `ingest --embed-model`, cron line, systemd unit and MCP
//!   configuration, read from the files and run from other folders, search hybrid with every
//!   chunk embedded.
//! - `formats`: every format (MDX, reStructuredText, AsciiDoc, HTML, PDF, notebooks) in a mixed
//!   folder: each hit at its lines (and pages), a re-run and a rename write nothing, an
//!   extractor upgrade re-chunks only its format, `--formats`, files not read counted by
//!   extension.
//! - `formats_html_rst`: the HTML and reStructuredText corpora found by what they hold, at the
//!   lines that hold it; hostile pages and files finish with output bounded by their size.
//! - `fuzz_regressions`: every input kept under `tests/fuzz_regressions/` passes its fuzz
//!   target's property checks (`fuzz/src/lib.rs`).
//! - `formats_pdf_adoc`: real PDFs found at their page's lines, hostile PDFs (bombs, loops,
//!   deep nesting, encryption) each a warning while the run goes on in bounded memory, the
//!   Spring Security AsciiDoc read with its headings, the pdf and asciidoc fuzz properties.

mod support;

mod abuse;
mod agent_cancel;
mod agent_concurrency;
mod agent_cursor;
mod agent_errors;
mod agent_http;
mod agent_keys;
mod agent_mcp;
mod agent_metrics;
mod agent_run_keys;
mod agent_semantic;
mod ann;
mod batches;
mod cli;
mod clients;
mod compressed_text;
mod config;
mod cors;
mod crash;
mod deletion;
mod doc_links;
mod edits;
mod embed_kill;
mod embed_local;
mod embedding;
mod faults;
mod foreign_store;
mod formats;
mod formats_html_rst;
mod formats_pdf_adoc;
mod fuzz_regressions;
mod group_commit;
mod heal;
mod hostile_input;
mod hostile_names;
mod hostile_servers;
mod hostile_tree;
mod hostile_vectors;
mod identifiers;
mod json_edges;
mod key_collision;
mod kill;
mod ledger_schemas;
mod lock;
mod malformed;
mod model_identity;
mod names;
mod ops;
mod pipes;
mod prompt;
mod python_package;
mod read_tools;
mod readme_setups;
mod recorded_model;
mod reingest;
mod relevance_floor;
mod replica_writes;
mod search;
mod search_generation;
mod semantic;
mod semantic_status;
mod serve_signals;
mod served_text;
mod shared_ledger;
mod signals;
mod slow_clients;
mod small_chunks;
mod stat_cache;
mod tidy;
mod two_roots;
mod verify;
mod verify_race;
