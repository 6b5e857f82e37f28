//! Child processes: waiting for a line they print or a pause point they reach, signals, a run
//! watched for its peak memory, and whether the tests run as root.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::Env;

/// Reads a child's stderr (or stdout) up to the first line containing `needle` (the event a test waits for,
/// instead of sleeping), then keeps draining it on a thread so the child never blocks on a full
/// pipe; the thread returns everything read, `needle`'s line included.
pub fn await_line(
    stderr: impl std::io::Read + Send + 'static,
    needle: &str,
) -> std::thread::JoinHandle<String> {
    use std::io::BufRead as _;
    let mut reader = std::io::BufReader::new(stderr);
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = reader
            .read_line(&mut line)
            .expect("read the child's output");
        seen.push_str(&line);
        if n == 0 {
            panic!("the output ended before a line containing {needle:?}:\n{seen}");
        }
        if line.contains(needle) {
            break;
        }
    }
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
        seen + &rest
    })
}

/// Waits until a process armed with `GROUNDIDX_PAUSE_AT=point@DIR` is held at its pause point
/// (it has created `DIR/paused`); the test then acts and writes `DIR/resume`. Fails at once if
/// the process ends first.
pub fn wait_paused(pauses: &Path, child: &mut std::process::Child) {
    let started = std::time::Instant::now();
    while !pauses.join("paused").exists() {
        if let Some(status) = child.try_wait().expect("poll the run") {
            panic!("the run ended ({status}) before reaching its pause point");
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the run never reached its pause point"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Sends `signal` (`TERM`, `INT`, …) to process `pid` with `kill`.
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} failed");
}

/// Whether the tests run as root (who reads and writes whatever the file modes say).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// Runs `groundidx ARGS…` in `env` while watching its peak resident set (its children are
/// apart); kills it, failing the test, past `limit_kib`. Returns the output and the peak (KiB).
pub fn run_bounded(env: &Env, args: &[&str], limit_kib: u64) -> (Output, u64) {
    let mut child = env
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn groundidx");
    let status_file = format!("/proc/{}/status", child.id());
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let mut peak = 0;
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll groundidx") {
            break status;
        }
        if let Ok(text) = std::fs::read_to_string(&status_file) {
            peak = peak.max(vm_hwm_kib(&text));
        }
        if peak > limit_kib {
            let _ = child.kill();
            let _ = child.wait();
            panic!("groundidx {args:?} grew past {peak} KiB resident and was killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let output = Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    };
    (output, peak)
}

/// `VmHWM` (peak resident set) from a `/proc/PID/status` text, in KiB.
pub fn vm_hwm_kib(status: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
