//! The shared ledger's numbered migrations, applied in one transaction under a table lock, and
//! the checks that leave a schema of another program untouched and refuse a newer version.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::ledger::postgres::{Budget, PgError, PgLedger};

/// The schema version this build reads and writes.
pub const PG_SCHEMA_VERSION: i64 = 5;

/// Every migration: `(version, name, SQL)`.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "ledger", include_str!("migrations/0001_ledger.sql")),
    (2, "vectors", include_str!("migrations/0002_vectors.sql")),
    (
        3,
        "log_tokens",
        include_str!("migrations/0003_log_tokens.sql"),
    ),
    (
        4,
        "recipe_versions",
        include_str!("migrations/0004_recipe_versions.sql"),
    ),
    (5, "pages", include_str!("migrations/0005_pages.sql")),
];

/// What `migrate` found and did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MigrateReport {
    pub backend: &'static str,
    pub ledger: String,
    /// The version before (0: no ledger there yet).
    pub from: i64,
    pub to: i64,
}

/// What a schema holds.
enum Found {
    Nothing,
    Ledger(i64),
    Foreign,
}

impl PgLedger {
    /// Creates the ledger's schema or upgrades it to this build's version. Two hosts migrating
    /// at once: the second waits on the lock of `schema_migrations`, then finds nothing to do.
    pub fn migrate(&self) -> Result<MigrateReport> {
        let schema = self.schema().to_string();
        let describe = self.describe();
        let result = self.run("migrate", Budget::Command, async |conn| {
            let tx = conn.transaction().await?;
            let from = match found(&tx, &schema).await? {
                Found::Foreign => return Err(PgError::App(foreign(&describe))),
                Found::Ledger(version) if version > PG_SCHEMA_VERSION => {
                    return Err(PgError::App(newer(&describe, version)));
                }
                Found::Ledger(version) => version,
                Found::Nothing => 0,
            };
            tx.batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                 CREATE TABLE IF NOT EXISTS \"{schema}\".schema_migrations (
                     version    int PRIMARY KEY,
                     name       text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
                 LOCK TABLE \"{schema}\".schema_migrations IN EXCLUSIVE MODE;"
            ))
            .await?;
            // Read again under the lock: another host may have migrated meanwhile.
            let at: i64 = tx
                .query_one(
                    &format!(
                        "SELECT coalesce(max(version), 0)::bigint FROM \"{schema}\".schema_migrations"
                    ),
                    &[],
                )
                .await?
                .get(0);
            for (version, name, sql) in MIGRATIONS.iter().filter(|(v, _, _)| *v > at) {
                tx.batch_execute(&format!("SET LOCAL search_path TO \"{schema}\";\n{sql}"))
                    .await?;
                tx.execute(
                    &format!(
                        "INSERT INTO \"{schema}\".schema_migrations (version, name) VALUES ($1, $2)"
                    ),
                    &[&(*version as i32), name],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(from)
        });
        let from = match result {
            Ok(from) => from,
            // Two very first migrations can collide in the catalog on `CREATE SCHEMA IF NOT
            // EXISTS`; the loser's second try finds the schema there.
            Err(Error::Shared { message, .. })
                if message.contains("SQLSTATE 23505") || message.contains("SQLSTATE 42P06") =>
            {
                return self.migrate();
            }
            Err(err) => return Err(err),
        };
        Ok(MigrateReport {
            backend: "postgres",
            ledger: self.describe(),
            from,
            to: PG_SCHEMA_VERSION,
        })
    }

    /// The schema's version, without changing anything: 0 when there is no ledger yet.
    pub fn schema_version(&self) -> Result<i64> {
        let schema = self.schema().to_string();
        let describe = self.describe();
        self.run("read the schema version", Budget::Command, async |conn| {
            let tx = conn.transaction().await?;
            match found(&tx, &schema).await? {
                Found::Foreign => Err(PgError::App(foreign(&describe))),
                Found::Ledger(version) => Ok(version),
                Found::Nothing => Ok(0),
            }
        })
    }

    /// Requires the ledger at this build's version (readers and servers never migrate a
    /// shared database as a side effect).
    pub fn check_schema(&self) -> Result<()> {
        match self.schema_version()? {
            PG_SCHEMA_VERSION => Ok(()),
            0 => Err(Error::Usage(format!(
                "no groundidx ledger in {}\nhint: run `groundidx migrate` (or the first `groundidx ingest`) with this --ledger",
                self.describe()
            ))),
            version if version > PG_SCHEMA_VERSION => Err(newer(&self.describe(), version)),
            version => Err(Error::Usage(format!(
                "the ledger in {} has schema version {version}, this groundidx needs {PG_SCHEMA_VERSION}\nhint: run `groundidx migrate`",
                self.describe()
            ))),
        }
    }
}

async fn found(tx: &deadpool_postgres::Transaction<'_>, schema: &str) -> Result<Found, PgError> {
    let row = tx
        .query_one(
            "SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE n.nspname = $1)
                  + (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                      WHERE n.nspname = $1),
                    EXISTS (SELECT 1 FROM information_schema.columns
                             WHERE table_schema = $1 AND table_name = 'schema_migrations'
                               AND column_name = 'name'),
                    to_regclass(quote_ident($1) || '.ledger_meta') IS NOT NULL",
            &[&schema],
        )
        .await?;
    let n_objects: i64 = row.get(0);
    let has_migrations: bool = row.get(1);
    let has_meta: bool = row.get(2);
    if !has_migrations {
        return Ok(if n_objects == 0 {
            Found::Nothing
        } else {
            Found::Foreign
        });
    }
    let version: i64 = tx
        .query_one(
            &format!(
                "SELECT coalesce(max(version), 0)::bigint FROM \"{schema}\".schema_migrations"
            ),
            &[],
        )
        .await?
        .get(0);
    // Another tool's `schema_migrations` (golang-migrate's has no `name`) was caught above; a
    // groundidx ledger past version 0 has its counter row.
    if version > 0 && !has_meta {
        return Ok(Found::Foreign);
    }
    Ok(Found::Ledger(version))
}

fn foreign(describe: &str) -> Error {
    Error::Usage(format!(
        "{describe} holds tables of another program (no schema_migrations); left untouched\nhint: pass a --ledger-schema of groundidx's own (a new one is fine)"
    ))
}

fn newer(describe: &str, version: i64) -> Error {
    Error::Usage(format!(
        "the ledger in {describe} has schema version {version}, this groundidx understands {PG_SCHEMA_VERSION}\nhint: use the groundidx that migrated it; every host upgrades together"
    ))
}
