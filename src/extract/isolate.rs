//! Running an extractor in a child process, so that nothing a hostile file makes a
//! third-party parser do (recurse until the stack overflows, inflate a stream to gigabytes,
//! loop on a cyclic reference, crash) can take the run down.
//!
//! The parent starts `<exe> extract-worker <format>` with the limits as arguments, writes the
//! file's bytes to its stdin from a thread, reads its stdout (at most `answer_cap` bytes) and
//! the last `STDERR_TAIL` bytes of its stderr from two more, and kills it when it runs past
//! the time limit plus `GRACE`. The child (`worker_main`) first limits itself (address space
//! to `Limits::max_memory`, CPU seconds to the time limit + 1, no core file, killed when its
//! parent dies), then reads
//! stdin, runs `extract_here` and writes `Result<Extracted, String>` as JSON.
//!
//! Every way the child can end maps to a result: its answer, or an `Err` that says what went
//! wrong with the file (out of memory, over time, crashed with a signal, an answer too long or
//! unreadable). The parent always waits for the child, so none is left a zombie.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{Extracted, Format, Limits, Options, Unreadable};

/// How long after the time limit the parent kills a child that has not answered: the child
/// stops itself at the limit (its own deadline) and then needs a moment to build and send the
/// text it read (tens of MB at most).
const GRACE: Duration = Duration::from_secs(5);

/// How much of the child's stderr is kept for an error message.
const STDERR_TAIL: usize = 512;

/// How often the parent looks whether the child has ended.
const POLL: Duration = Duration::from_millis(5);

/// The name of the subcommand the child runs.
pub(crate) const WORKER_COMMAND: &str = "extract-worker";

/// Extracts `bytes` as `format` in a child process of `exe` under `options.limits`.
pub(crate) fn extract_in_child(
    exe: &Path,
    format: Format,
    bytes: &[u8],
    options: &Options,
) -> Result<Extracted, Unreadable> {
    let limits = &options.limits;
    let reader = reader_name(format);
    let mut child = Command::new(exe)
        .arg(WORKER_COMMAND)
        .arg(format.name())
        .args(worker_arguments(limits))
        // Its stderr ends up in a warning: a message, never a backtrace with build paths.
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| {
            format!(
                "could not start the {reader} ({} {WORKER_COMMAND}: {err}); skipped",
                exe.display()
            )
        })?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        kill_and_wait(&mut child);
        return Err(format!("could not talk to the {reader}; skipped"));
    };
    let cap = answer_cap(limits);
    let answer = std::thread::scope(|scope| {
        // A child that ends without reading all of stdin makes the write fail: that is its
        // answer's business, not an error here.
        scope.spawn(move || {
            let _ = stdin.write_all(bytes);
        });
        let out = scope.spawn(move || read_capped(stdout, cap));
        let err = scope.spawn(move || read_tail(stderr, STDERR_TAIL));
        let ended = wait_until(&mut child, Instant::now() + limits.time + GRACE);
        let status = match ended {
            Some(status) => Ending::Exited(status),
            None => {
                kill_and_wait(&mut child);
                Ending::TimedOut
            }
        };
        // The pipes close once the child is gone, so the readers end.
        let out = out.join().unwrap_or_default();
        let err = err.join().unwrap_or_default();
        (status, out, err)
    });
    let (ending, (stdout, over_cap), stderr) = answer;
    interpret(&reader, limits, ending, &stdout, over_cap, &stderr)
}

/// How the child ended.
enum Ending {
    Exited(ExitStatus),
    TimedOut,
}

/// The arguments that pass `limits` to the worker (`extract-worker FORMAT ARGS…`).
fn worker_arguments(limits: &Limits) -> Vec<String> {
    vec![
        format!("--max-memory={}", limits.max_memory),
        format!("--time-ms={}", limits.time.as_millis()),
        format!("--max-depth={}", limits.max_depth),
        format!("--max-text-bytes={}", limits.max_text_bytes),
    ]
}

/// The most stdout read from a child: its text JSON-escaped (up to twice as long, more for
/// control characters, which are rare), its locations and units.
fn answer_cap(limits: &Limits) -> usize {
    limits
        .max_text_bytes
        .saturating_mul(3)
        .saturating_add(64 << 20)
}

/// "the PDF reader", for messages.
fn reader_name(format: Format) -> String {
    let name = match format {
        Format::Pdf => "PDF".to_string(),
        other => other.name().to_string(),
    };
    format!("{name} reader")
}

/// Waits for the child until `deadline`; `None` when it is still running then.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() >= deadline => return None,
            Ok(None) => std::thread::sleep(POLL),
            Err(_) => return None,
        }
    }
}

/// Kills the child and reaps it.
fn kill_and_wait(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads at most `cap` bytes; whether there was more. What is past the cap is read and
/// dropped, so the child never blocks on a full pipe.
fn read_capped(mut from: impl Read, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut buffer = [0u8; 64 << 10];
    let mut over = false;
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if kept.len() + n <= cap {
                    kept.extend_from_slice(&buffer[..n]);
                } else {
                    over = true;
                    kept = Vec::new();
                }
            }
        }
    }
    (kept, over)
}

/// Reads everything, keeping the last `size` bytes.
fn read_tail(mut from: impl Read, size: usize) -> Vec<u8> {
    let mut tail = Vec::with_capacity(size * 2);
    let mut buffer = [0u8; 8 << 10];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tail.extend_from_slice(&buffer[..n]);
                if tail.len() > size {
                    tail.drain(..tail.len() - size);
                }
            }
        }
    }
    tail
}

/// The result of a child's run.
fn interpret(
    reader: &str,
    limits: &Limits,
    ending: Ending,
    stdout: &[u8],
    over_cap: bool,
    stderr: &[u8],
) -> Result<Extracted, Unreadable> {
    let stderr = String::from_utf8_lossy(stderr);
    let stderr = super::fold_space(&stderr);
    let memory_mib = limits.max_memory >> 20;
    let seconds = limits.time.as_secs();
    let status = match ending {
        Ending::TimedOut => return Err(format!("took over {seconds} s; skipped")),
        Ending::Exited(status) => status,
    };
    if stderr.contains("memory allocation of") || stderr.contains("capacity overflow") {
        return Err(format!(
            "the {reader} ran out of its {memory_mib} MiB memory limit"
        ));
    }
    if stderr.contains("has overflowed its stack") {
        return Err(format!(
            "the {reader} crashed (its stack overflowed: the file nests too deep)"
        ));
    }
    if let Some(signal) = signal_of(status) {
        return Err(match signal {
            // SIGXCPU, or the SIGKILL that follows it at the hard CPU limit.
            24 => format!("took over {seconds} s of CPU time; skipped"),
            _ => format!(
                "the {reader} crashed (signal {signal}){}",
                tail_note(&stderr)
            ),
        });
    }
    if !status.success() {
        return Err(format!(
            "the {reader} failed ({status}){}",
            tail_note(&stderr)
        ));
    }
    if over_cap {
        return Err(format!(
            "the {reader}'s answer is over {} bytes; skipped",
            answer_cap(limits)
        ));
    }
    serde_json::from_slice::<Result<Extracted, Unreadable>>(stdout).map_err(|err| {
        format!(
            "the {reader}'s answer could not be read ({err}){}",
            tail_note(&stderr)
        )
    })?
}

#[cfg(unix)]
fn signal_of(status: ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(&status)
}

#[cfg(not(unix))]
fn signal_of(_status: ExitStatus) -> Option<i32> {
    None
}

/// ": <the end of stderr>", or nothing when it said nothing.
fn tail_note(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

/// The limits a worker was started with, as `worker_arguments` wrote them.
#[derive(Clone, Debug)]
pub struct WorkerLimits {
    pub max_memory: u64,
    pub time_ms: u64,
    pub max_depth: usize,
    pub max_text_bytes: usize,
}

impl WorkerLimits {
    pub fn limits(&self) -> Limits {
        Limits {
            max_depth: self.max_depth,
            max_text_bytes: self.max_text_bytes,
            time: Duration::from_millis(self.time_ms),
            max_memory: self.max_memory,
        }
    }
}

/// The child's side: limits itself, reads the file from stdin, extracts it and writes the
/// answer as JSON to stdout. An `Err` is a failure of the worker itself (its stdout closed),
/// not of the file, which is part of the answer.
pub fn worker_main(format: Format, limits: &Limits) -> std::io::Result<()> {
    limit_self(limits)?;
    let mut bytes = Vec::new();
    std::io::stdin().lock().read_to_end(&mut bytes)?;
    let answer = super::extract_here(format, &bytes, limits);
    drop(bytes);
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, &answer).map_err(std::io::Error::other)?;
    stdout.flush()
}

/// Sets this process's limits: address space, CPU seconds (the time limit and one more), and
/// no core file; and asks to be killed when its parent dies (an ingest killed with SIGKILL
/// leaves no worker reading on).
fn limit_self(limits: &Limits) -> std::io::Result<()> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    #[cfg(target_os = "linux")]
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|err| std::io::Error::other(format!("set the parent-death signal: {err}")))?;
    let cpu_seconds = limits.time.as_secs().saturating_add(1);
    for (resource, soft, hard) in [
        (Resource::As, limits.max_memory, limits.max_memory),
        (Resource::Cpu, cpu_seconds, cpu_seconds.saturating_add(1)),
        (Resource::Core, 0, 0),
    ] {
        let current = rustix::process::getrlimit(resource);
        // A limit can only be lowered without privileges: keep one already lower.
        let lower = |wanted: u64, now: Option<u64>| Some(now.map_or(wanted, |now| now.min(wanted)));
        setrlimit(
            resource,
            Rlimit {
                current: lower(soft, current.current),
                maximum: lower(hard, current.maximum),
            },
        )
        .map_err(|err| std::io::Error::other(format!("setrlimit {resource:?}: {err}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Ending, interpret, read_capped, read_tail, worker_arguments};
    use crate::extract::Limits;

    #[cfg(unix)]
    fn status(code: i32) -> std::process::ExitStatus {
        std::os::unix::process::ExitStatusExt::from_raw(code)
    }

    #[test]
    fn every_ending_names_the_problem() {
        let limits = Limits::default();
        let run = |raw: i32, stderr: &str| {
            interpret(
                "PDF reader",
                &limits,
                Ending::Exited(status(raw)),
                b"",
                false,
                stderr.as_bytes(),
            )
            .expect_err("an error")
        };
        assert_eq!(
            run(6, "memory allocation of 4294967296 bytes failed\n"),
            "the PDF reader ran out of its 2048 MiB memory limit"
        );
        assert!(run(6, "thread 'main' has overflowed its stack\n").contains("stack overflowed"));
        assert_eq!(run(11, ""), "the PDF reader crashed (signal 11)");
        assert_eq!(run(24, ""), "took over 60 s of CPU time; skipped");
        assert!(run(1 << 8, "boom").contains("boom"));
        let timed_out = interpret("PDF reader", &limits, Ending::TimedOut, b"", false, b"");
        assert_eq!(timed_out, Err("took over 60 s; skipped".to_string()));
        let garbage = interpret(
            "PDF reader",
            &limits,
            Ending::Exited(status(0)),
            b"{",
            false,
            b"",
        );
        assert!(garbage.expect_err("garbage").contains("could not be read"));
        let over = interpret(
            "PDF reader",
            &limits,
            Ending::Exited(status(0)),
            b"",
            true,
            b"",
        );
        assert!(over.expect_err("over").contains("answer is over"));
    }

    #[test]
    fn answers_pass_through() {
        let limits = Limits::default();
        let answer: Result<crate::extract::Extracted, String> = Err("encrypted PDF".to_string());
        let json = serde_json::to_vec(&answer).expect("json");
        let got = interpret(
            "PDF reader",
            &limits,
            Ending::Exited(status(0)),
            &json,
            false,
            b"",
        );
        assert_eq!(got, answer);
    }

    #[test]
    fn reading_is_bounded() {
        let (kept, over) = read_capped(&[7u8; 1000][..], 100);
        assert!(over && kept.is_empty());
        let (kept, over) = read_capped(&[7u8; 100][..], 100);
        assert!(!over && kept.len() == 100);
        let tail = read_tail(&b"0123456789".repeat(10_000)[..], 16);
        assert_eq!(tail, b"4567890123456789");
    }

    #[test]
    fn the_limits_travel_as_arguments() {
        let limits = Limits {
            max_depth: 7,
            max_text_bytes: 99,
            time: std::time::Duration::from_millis(1500),
            max_memory: 1 << 20,
        };
        assert_eq!(
            worker_arguments(&limits),
            [
                "--max-memory=1048576",
                "--time-ms=1500",
                "--max-depth=7",
                "--max-text-bytes=99"
            ]
        );
    }
}
