//! The PostgreSQL tests' environment: the database `.ci/run` starts (`GROUNDIDX_TEST_PG`), a
//! schema of its own per test, dropped when the test ends, and a client to look inside it; the
//! hosts of a shared ledger and a test's fixture of documents, schema and hosts
//! ([`SharedFixture`]); clusters of a test's own.
//!
//! `GROUNDIDX_TEST_PG` is a URL with the cluster's socket folder percent-encoded as its host,
//! `postgresql://postgres@%2Ftmp%2Fgroundidx-pg.XXXXXX/groundidx_test`: tokio-postgres (and so
//! `postgres`) decodes the host and takes one that starts with `/` for a unix socket folder.
//! The helpers here are blocking (`postgres::Client` runs its own Tokio runtime): call them from
//! synchronous tests, never on a thread inside a Tokio runtime.
#![allow(dead_code, reason = "each test uses some of these helpers")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::http::{Server, serve_with_env};
use crate::support::{
    BIN, Env, Exported, assert_success, clean_export, is_root, isolate, parse_export,
};

/// The test database's URL, from `GROUNDIDX_TEST_PG`; `None` when that is unset or empty
/// (`prerequisite_missing`: a failure under CI, a skip with a message elsewhere).
pub fn url() -> Option<String> {
    match std::env::var("GROUNDIDX_TEST_PG") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            crate::support::prerequisite_missing(
                "PostgreSQL: GROUNDIDX_TEST_PG is not set (.ci/run starts a cluster and sets it)",
            );
            None
        }
    }
}

/// One test's PostgreSQL schema in the test database, named uniquely; dropped with all it holds
/// when this is dropped. Not created here: the program under test creates it when it migrates.
pub struct TestSchema {
    /// The test database's URL (`GROUNDIDX_TEST_PG`).
    pub url: String,
    /// The schema's name: `t_<tag>_<pid>_<counter>_<nanoseconds>`, at most 63 bytes of
    /// `[a-z0-9_]`, so it needs no quoting (the helpers quote it all the same).
    pub name: String,
}

impl TestSchema {
    /// A fresh schema name for the test `tag` (lowercased, anything but `[a-z0-9]` becoming
    /// `_`, shortened to fit); `None` when there is no test database (see [`url`]).
    pub fn new(tag: &str) -> Option<TestSchema> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let url = url()?;
        let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let suffix = format!("_{}_{counter}_{nanos}", std::process::id());
        let tag: String = tag
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        // PostgreSQL keeps 63 bytes of a name; every character of `tag` is one ASCII byte now.
        let room = 63usize.saturating_sub("t_".len() + suffix.len());
        let name = format!("t_{}{suffix}", &tag[..tag.len().min(room)]);
        Some(TestSchema { url, name })
    }

    /// The flags that point a `groundidx` command at this schema:
    /// `--ledger URL --ledger-schema NAME`.
    pub fn args(&self) -> [String; 4] {
        [
            "--ledger".to_string(),
            self.url.clone(),
            "--ledger-schema".to_string(),
            self.name.clone(),
        ]
    }
}

impl Drop for TestSchema {
    /// Drops the schema and everything in it; an error is printed, never raised.
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // A thread of its own, so that dropping inside a Tokio runtime cannot panic.
        let dropped = std::thread::spawn(move || -> Result<(), postgres::Error> {
            let mut client = postgres::Client::connect(&url, postgres::NoTls)?;
            client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("could not drop the test schema {}: {error}", self.name),
            Err(_) => eprintln!("dropping the test schema {} panicked", self.name),
        }
    }
}

/// A connection to the database at `url`; panics, naming the URL and the error, when there is
/// none.
pub fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls)
        .unwrap_or_else(|error| panic!("cannot connect to PostgreSQL at {url}: {error}"))
}

/// `SELECT count(*) FROM "<schema>".<sql_after_from>`, for example
/// `count(url, &schema.name, "chunks WHERE doc_id = 1")`; panics, naming the query, on an error.
pub fn count(url: &str, schema: &str, sql_after_from: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM \"{schema}\".{sql_after_from}");
    let row = client(url)
        .query_one(sql.as_str(), &[])
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    row.get(0)
}

/// A PostgreSQL cluster of one test's own (for stopping and starting it under load): a temp
/// folder with its data and its unix socket, the binaries from `GROUNDIDX_TEST_PG_BIN` (as
/// `.ci/run` sets it) or Debian's PostgreSQL 15. Run as `postgres` when the tests run as root,
/// since PostgreSQL refuses root. Stopped and removed on drop.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    /// `postgresql://postgres@<socket folder>/postgres`
    pub url: String,
}

impl Cluster {
    /// Starts a new cluster; `None` (a failure under CI) when PostgreSQL's binaries are missing.
    pub fn start() -> Option<Cluster> {
        let cluster = Cluster::folder()?;
        cluster.pg(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
            ],
        );
        cluster.resume();
        Some(cluster)
    }

    /// A cluster that takes only TLS connections, on a loopback port: a CA made for it signs
    /// its certificate (for `127.0.0.1`); `local` connections stay plain for the tests' own
    /// client. Returns the cluster, its port and the CA's PEM file.
    pub fn start_tls() -> Option<(Cluster, u16, std::path::PathBuf)> {
        let cluster = Cluster::folder()?;
        cluster.pg(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
            ],
        );
        let dir = cluster.dir.path().to_path_buf();
        let sh = |script: &str| {
            let status = std::process::Command::new("sh")
                .args(["-ec", script])
                .current_dir(&dir)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .expect("run openssl");
            assert!(status.success(), "openssl: {script}");
        };
        sh(
            "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
              -keyout ca.key -out ca.crt -days 2 -subj /CN=groundidx-test-ca",
        );
        sh(
            "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
              -keyout server.key -out server.csr -subj /CN=127.0.0.1",
        );
        sh(
            "printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > ext; \
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
              -out server.crt -days 2 -extfile ext",
        );
        if is_root() {
            sh("chown postgres:postgres server.key server.crt && chmod 600 server.key");
        } else {
            sh("chmod 600 server.key");
        }
        std::fs::write(
            dir.join("data/pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 0.0.0.0/0 reject\n",
        )
        .expect("write pg_hba.conf");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k {0} -c fsync=off -c ssl=on \
             -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key",
            dir.display()
        );
        let log = dir.join("log").to_string_lossy().into_owned();
        cluster.pg(
            "pg_ctl",
            &[
                "-D",
                &cluster.data(),
                "-l",
                &log,
                "-w",
                "-o",
                &options,
                "start",
            ],
        );
        let mut cluster = cluster;
        // Its socket is named by the port too.
        cluster.url = format!(
            "postgresql://postgres@{}:{port}/postgres",
            dir.to_string_lossy().replace('/', "%2F")
        );
        Some((cluster, port, dir.join("ca.crt")))
    }

    /// A streaming standby of `primary` (a base backup of it, following its WAL), started;
    /// the primary then waits for it at every commit (synchronous replication), so a commit
    /// a client saw is on the standby when the primary dies.
    pub fn standby_of(primary: &Cluster) -> Option<Cluster> {
        let standby = Cluster::folder()?;
        let primary_dir = primary.dir.path().to_string_lossy().into_owned();
        standby.pg(
            "pg_basebackup",
            &[
                "-h",
                &primary_dir,
                "-U",
                "postgres",
                "-D",
                &standby.data(),
                "-R",
                "-X",
                "stream",
            ],
        );
        standby.resume();
        let mut client = client(&primary.url);
        for statement in [
            "ALTER SYSTEM SET synchronous_standby_names = '*'",
            "SELECT pg_reload_conf()",
        ] {
            client
                .batch_execute(statement)
                .expect("synchronous replication");
        }
        Some(standby)
    }

    /// Makes a standby the primary.
    pub fn promote(&self) {
        self.pg("pg_ctl", &["-D", &self.data(), "-w", "promote"]);
    }

    /// The socket folder, percent-encoded as a URL host.
    pub fn host(&self) -> String {
        self.dir.path().to_string_lossy().replace('/', "%2F")
    }

    /// An empty folder for a cluster, owned by `postgres` when the tests run as root.
    fn folder() -> Option<Cluster> {
        let bin = std::env::var_os("GROUNDIDX_TEST_PG_BIN")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| "/usr/lib/postgresql/15/bin".into());
        if !bin.join("pg_ctl").exists() {
            crate::support::prerequisite_missing(&format!(
                "PostgreSQL's binaries: no pg_ctl in {} (set GROUNDIDX_TEST_PG_BIN)",
                bin.display()
            ));
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("groundidx-pgc")
            .tempdir_in("/tmp")
            .expect("temp folder");
        if is_root() {
            let status = std::process::Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown the cluster folder to postgres");
        }
        let encoded = dir.path().to_string_lossy().replace('/', "%2F");
        Some(Cluster {
            url: format!("postgresql://postgres@{encoded}/postgres"),
            bin,
            dir,
        })
    }

    fn data(&self) -> String {
        self.dir.path().join("data").to_string_lossy().into_owned()
    }

    /// A PostgreSQL tool's command, as `postgres` when the tests run as root.
    fn tool(&self, tool: &str) -> std::process::Command {
        let program = self.bin.join(tool);
        let mut command = if is_root() {
            let mut command = std::process::Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            std::process::Command::new(&program)
        };
        command.current_dir("/");
        command
    }

    fn pg(&self, tool: &str, args: &[&str]) {
        let output = self
            .tool(tool)
            .args(args)
            .output()
            .expect("run a PostgreSQL tool");
        assert!(
            output.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Starts the server (again), waiting until it accepts connections.
    pub fn resume(&self) {
        let options = format!(
            "-c listen_addresses='' -k {} -c fsync=off",
            self.dir.path().display()
        );
        let log = self.dir.path().join("log").to_string_lossy().into_owned();
        self.pg(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-w",
                "-o",
                &options,
                "start",
            ],
        );
    }

    /// Stops the server at once, as a crash would (`-m immediate`).
    pub fn stop(&self) {
        self.pg(
            "pg_ctl",
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Already stopped is fine; the folder goes with `dir`.
        let _ = self
            .tool("pg_ctl")
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// One host of a shared ledger: a store folder of its own, pointed at the shared schema.
pub struct Host<'a> {
    pub store: PathBuf,
    pub schema: &'a TestSchema,
}

impl Host<'_> {
    pub fn new<'a>(env: &Env, name: &str, schema: &'a TestSchema) -> Host<'a> {
        Host {
            store: env.tmp.path().join(name),
            schema,
        }
    }

    /// `groundidx --store STORE --ledger URL --ledger-schema S --lease-ttl 1s ARGS…`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        isolate(&mut command);
        command
            .arg("--store")
            .arg(&self.store)
            .args(self.schema.args())
            .args(["--lease-ttl", "1s"])
            .args(args);
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run groundidx")
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let output = self.run(args);
        assert_success(&output, args);
        serde_json::from_slice(&output.stdout).expect("JSON on stdout")
    }

    pub fn ingest(&self, docs: &Path) -> Value {
        self.json(&[
            "ingest",
            docs.to_str().expect("utf-8"),
            "--json",
            "--wait",
            "30",
        ])
    }

    pub fn sync(&self) -> Value {
        self.json(&["sync", "--json"])
    }

    /// The replica's chunks (read locally, as every reader does).
    pub fn export(&self) -> BTreeMap<String, Exported> {
        let output = self.run(&["export"]);
        assert_success(&output, &["export"]);
        parse_export(&String::from_utf8_lossy(&output.stdout))
    }

    pub fn assert_verified(&self) {
        let report = self.json(&["verify", "--json"]);
        assert_eq!(report["identical"], true, "verify: {report}");
    }
}

/// A shared-ledger test's setup: a folder of documents (`env`, whose `store` no host uses) and
/// a schema of the test's own that its hosts share; `None` when there is no test database (a
/// failure under CI). `ingested([...])` gives hosts, the first having ingested the documents.
pub struct SharedFixture {
    pub env: Env,
    pub schema: TestSchema,
}

impl SharedFixture {
    /// A copy of `sample_docs/` and a fresh schema for the test `tag`.
    pub fn sample(tag: &str) -> Option<SharedFixture> {
        let schema = TestSchema::new(tag)?;
        Some(SharedFixture {
            env: Env::sample(),
            schema,
        })
    }

    /// An empty `docs/` and a fresh schema for the test `tag`.
    pub fn empty(tag: &str) -> Option<SharedFixture> {
        let schema = TestSchema::new(tag)?;
        Some(SharedFixture {
            env: Env::empty(),
            schema,
        })
    }

    /// Writes a document under `docs/`, creating folders.
    pub fn write(&self, rel: &str, text: &str) {
        self.env.write(rel, text);
    }

    /// The host `name`: the store `TMP/name` on the shared schema.
    pub fn host(&self, name: &str) -> Host<'_> {
        Host::new(&self.env, name, &self.schema)
    }

    /// One host per name, none of them run yet.
    pub fn hosts<const N: usize>(&self, names: [&str; N]) -> [Host<'_>; N] {
        names.map(|name| self.host(name))
    }

    /// One host per name; the first has ingested the documents (and so made the schema).
    pub fn ingested<const N: usize>(&self, names: [&str; N]) -> [Host<'_>; N] {
        let hosts = self.hosts(names);
        if let Some(first) = hosts.first() {
            first.ingest(&self.env.docs);
        }
        hosts
    }

    /// `SELECT count(*) FROM "<schema>".<sql_after_from>` (see [`count`]).
    pub fn count(&self, sql_after_from: &str) -> i64 {
        count(&self.schema.url, &self.schema.name, sql_after_from)
    }

    /// The shared ledger's counter row: (generation, log position).
    pub fn counters(&self) -> (i64, i64) {
        let row = client(&self.schema.url)
            .query_one(
                format!(
                    "SELECT generation, log_seq FROM \"{}\".ledger_meta",
                    self.schema.name
                )
                .as_str(),
                &[],
            )
            .expect("read ledger_meta");
        (row.get(0), row.get(1))
    }

    /// Every replica holds what a clean ingest of the documents holds, once each, verified; and
    /// the shared ledger holds exactly as many chunks.
    pub fn assert_all_equal_clean(&self, hosts: &[&Host<'_>]) {
        let clean = clean_export(&self.env.docs);
        for host in hosts {
            assert_eq!(host.export(), clean, "replica {}", host.store.display());
            host.assert_verified();
        }
        assert_eq!(
            self.count("chunks") as usize,
            clean.len(),
            "the shared ledger's chunks"
        );
    }

    /// `groundidx serve` as the host `name` on the shared schema (its store `TMP/name`), with
    /// `extra` flags and `envs` set.
    pub fn serve(&self, name: &str, extra: &[&str], envs: &[(&str, &str)]) -> Server {
        let host_env = Env {
            tmp: tempfile::tempdir().expect("temp"),
            docs: self.env.docs.clone(),
            store: self.env.tmp.path().join(name),
        };
        let args = self.schema.args();
        let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
        all.extend_from_slice(extra);
        serve_with_env(&host_env, &all, envs)
    }
}
