//! Child processes: waiting for a line they print or a pause point they reach, signals, and
//! whether the tests run as root.

use std::path::Path;
use std::process::Command;

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
