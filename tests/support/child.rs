//! Processes the tests start and watch: their stderr kept line by line, SIGTERM and the exit,
//! killed on drop; and frames sent into a lab.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use roce_observer::{
    lab::{Lab, Netns},
    source::synth::{self, Frame},
};

/// A child process (stdin and stdout closed), its stderr collected; killed on drop.
pub struct LoggedChild {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl LoggedChild {
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self { child, log }
    }

    /// What it logged so far.
    pub fn text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits (up to `timeout`) until a line of its log holds `needle`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log.lock().unwrap().iter().any(|l| l.contains(needle)) {
            assert!(Instant::now() < deadline, "no '{needle}':\n{}", self.text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then waits (up to 30 s) for the exit: its status and all it logged.
    pub fn stop(mut self) -> (ExitStatus, String) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                // The reader thread has the last lines once the pipe closes.
                std::thread::sleep(Duration::from_millis(200));
                return (s, self.text());
            }
            assert!(Instant::now() < deadline, "no exit:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for LoggedChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `frames` on the lab's `tx0` in `ns` from one CPU (as a NIC's RSS keeps a flow on one
/// queue: XDP on veth runs on the sender's CPU), every one of them.
pub fn send_frames(ns: &Netns, frames: Vec<Frame>) {
    let want = frames.len();
    let n = ns
        .run_in(move || {
            roce_observer::lab::pin_current_thread().expect("pin");
            synth::send(Lab::TX, &frames)
        })
        .unwrap()
        .expect("send");
    assert_eq!(n, want);
}
