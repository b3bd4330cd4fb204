//! The tests' OTLP receiver (otlp_receiver.py: the official protobufs and grpcio), run as a
//! child process.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
};

use serde_json::Value;

use crate::{Scratch, workspace_root};

/// The receiver, running; killed on drop.
pub struct OtlpReceiver {
    child: Child,
    pub grpc: u16,
    pub http: u16,
    out: PathBuf,
}

impl OtlpReceiver {
    /// Starts it here, writing what it receives under `scratch` as `name`.jsonl.
    pub fn start(scratch: &Scratch, name: &str, flags: &[&str]) -> Self {
        Self::start_with(Command::new(crate::venv_python()), scratch, name, flags)
    }

    /// Starts it with `python` (the virtualenv's Python, perhaps run in a namespace).
    pub fn start_with(mut python: Command, scratch: &Scratch, name: &str, flags: &[&str]) -> Self {
        let out = scratch.path(&format!("{name}.jsonl"));
        let mut child = python
            .arg(workspace_root().join("tests/support/otlp_receiver.py"))
            .arg(&out)
            .args(flags)
            // grpcio's own log (a refused TLS handshake, say) is not the test's.
            .env("GRPC_VERBOSITY", "NONE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ports: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("receiver's ports {line:?}: {e}"));
        Self {
            child,
            grpc: ports["grpc"].as_u64().unwrap() as u16,
            http: ports["http"].as_u64().unwrap() as u16,
            out,
        }
    }

    /// Its plain URL for `grpc` or `http`.
    pub fn url(&self, transport: &str) -> String {
        let port = if transport == "grpc" {
            self.grpc
        } else {
            self.http
        };
        format!("http://127.0.0.1:{port}")
    }

    pub fn tls_url(&self, transport: &str) -> String {
        self.url(transport).replace("http://", "https://")
    }

    /// Everything received so far, a JSON object per record or data point.
    /// A receiver killed while writing a request's lines may leave the last one cut short (a
    /// request it never answered, so sent again): such a line is left out.
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The connection sides a report's records have a row for: those that sent a flow (on some
/// port) or packets, posted messages or had requests timed (the far end of a direction seen
/// alone has none), by the report's fields as its JSON has them.
pub fn connection_sides_seen(report: &roce_observer::model::Report) -> usize {
    report
        .connections
        .iter()
        .flat_map(|c| [&c.a, &c.b])
        .filter(|s| {
            let l = &s.latency;
            !s.ports.is_empty()
                || s.packets > 0
                || s.messages.is_some()
                || l.ack.is_some()
                || l.read.is_some()
                || l.skipped > 0
                || l.conflicts > 0
        })
        .count()
}
