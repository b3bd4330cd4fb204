//! Running the CLI under test: a `diagnose` in a namespace, commands with their output, and the
//! one line of an error.

use std::{
    io::{BufRead, BufReader, Read},
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
};

use roce_observer::lab::Netns;
use roce_observer_cli::ATTACHED;

/// A `roce-observer diagnose` running in a namespace, attached (its "attached" line read).
pub struct Diagnose {
    pub child: Child,
    stderr: BufReader<std::process::ChildStderr>,
    pub stderr_text: String,
}

impl Diagnose {
    /// Starts `cli diagnose ARGS` in `ns` and waits until it has attached.
    pub fn start(ns: &Netns, cli: &Path, args: &[&str]) -> Self {
        Self::start_command(ns, cli, "diagnose", args)
    }

    /// Starts `cli COMMAND ARGS` (a command that observes live) in `ns` and waits until it has
    /// attached.
    pub fn start_command(ns: &Netns, cli: &Path, command: &str, args: &[&str]) -> Self {
        let mut child = ns
            .command(cli)
            .arg(command)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn diagnose");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut text = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let status = child.wait().unwrap();
                panic!("diagnose exited ({status}) before attaching: {text}");
            }
            text.push_str(&line);
            if line.starts_with(ATTACHED) {
                break;
            }
        }
        Self {
            child,
            stderr,
            stderr_text: text,
        }
    }

    /// Waits for the end; returns status, stdout, and all of stderr.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.stderr.read_to_string(&mut self.stderr_text).unwrap();
        let status = self.child.wait().unwrap();
        (status, out, self.stderr_text)
    }
}

/// Runs a command to completion: (status, stdout, stderr).
pub fn output(cmd: &mut Command) -> (ExitStatus, String, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("run command");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `cmd` with `input` on its standard input (written whole, then closed) and its output
/// captured.
pub fn run_with_input(cmd: &mut Command, input: &[u8]) -> std::io::Result<std::process::Output> {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input)?;
    child.wait_with_output()
}

/// The last non-empty stderr line, which must be the one error line.
pub fn error_line(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    lines[0].to_string()
}

/// A `&str` as the `&OsStr` of an argument list.
pub fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}
