//! Fixtures shared by the integration tests: real RTSP cameras, in-process or as child processes,
//! real brokers, and `edgevlm run` children.
#![allow(dead_code, unused_imports)] // each test binary uses a different subset

pub mod frames;
pub mod live;
pub mod mqtt;
pub mod rtsp;
pub mod run;
pub mod smolvlm2;
pub mod tempdir;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use frames::{Frame, Rng};
pub use rtsp::{CameraSpec, Codec, RtspServer};
pub use run::RunProcess;

/// Polls `cond` every 50 ms until it holds or `timeout` passes; returns whether it held.
pub async fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A finished command's stdout and stderr, for assertion messages.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `curl -s` with `args` against `url` (a real HTTP client): (HTTP status, body as JSON, `Null`
/// when it is not JSON).
pub fn curl_json(url: &str, args: &[&str]) -> (u16, serde_json::Value) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "120", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    let body = String::from_utf8_lossy(&out.stdout).to_string();
    let (json, status) = body.rsplit_once('\n').expect("status line");
    (
        status.trim().parse().unwrap_or(0),
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}

/// One sample's value on the `/metrics` page served on `port`; `None` while the page does not
/// answer or lacks the sample.
pub fn metric(port: u16, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut page = String::new();
    s.read_to_string(&mut page).ok()?;
    page.lines()
        .find(|l| l.split(' ').next() == Some(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A child process that is killed and reaped when the guard drops: a test that fails (and
/// unwinds) leaves no `edgevlm run` behind holding ports and CPU.
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    pub fn new(child: Child) -> KillOnDrop {
        KillOnDrop(Some(child))
    }

    /// The child, no longer killed on drop (for `wait_with_output`).
    pub fn into_inner(mut self) -> Child {
        self.0.take().expect("the child")
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("the child")
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends SIGTERM to `child` and waits for it to exit; after `bound` (which only limits a
/// failure) it is killed and the test fails, showing `context()` (its log).
pub fn terminate(
    child: &mut Child,
    bound: Duration,
    context: impl Fn() -> String,
) -> std::process::ExitStatus {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + bound;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no exit within {bound:?} of SIGTERM:\n{}", context());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `edgevlm` binary under test.
/// The tiny model's directory (made by scripts/setup.sh), for configurations written outside
/// the repository: a relative `model_dir`, the default one included, resolves against the
/// configuration's own directory.
#[allow(dead_code)]
pub const TINY_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/engines/tiny/model");

pub fn edgevlm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_edgevlm"))
}

/// A port nothing listens on (bound then released).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The test camera in a child process, so a test can kill it (camera gone) or stop it with
/// SIGSTOP (camera frozen with its TCP connection open), like real cameras fail.
pub struct ChildCamera {
    /// The bound port.
    pub port: u16,
    child: Child,
}

impl ChildCamera {
    /// Starts the `rtsp_test_server` example; `port` 0 picks a free one.
    pub fn spawn(port: u16) -> ChildCamera {
        let exe = example_path("rtsp_test_server");
        let mut child = Command::new(&exe)
            .args(["--port", &port.to_string(), "--fps", "15"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display()));
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read READY");
        let port = line
            .trim()
            .strip_prefix("READY ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected server output {line:?}"));
        ChildCamera { port, child }
    }

    /// The camera's URL.
    pub fn url(&self) -> String {
        format!("rtsp://127.0.0.1:{}/cam", self.port)
    }

    /// SIGKILL: the TCP connection closes, as when a camera loses power.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGSTOP: the connection stays open but nothing is sent, as with a hung camera.
    pub fn freeze(&self) {
        signal(&self.child, libc::SIGSTOP);
    }

    /// SIGCONT after [`freeze`](Self::freeze).
    pub fn thaw(&self) {
        signal(&self.child, libc::SIGCONT);
    }
}

impl Drop for ChildCamera {
    fn drop(&mut self) {
        signal(&self.child, libc::SIGCONT);
        self.kill();
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

/// Path of an example binary built by `cargo test` next to the test binaries.
pub fn example_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> -> target/<profile>/examples/<name>
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --examples` (cargo test does this)",
        path.display()
    );
    path
}
