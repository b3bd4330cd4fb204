//! Signals: registered before the daemon attaches (a SIGTERM during start-up must detach, not
//! kill), then turned into commands for the collector thread until it ends.

use std::{io::Write, os::unix::net::UnixStream, sync::mpsc};

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::DaemonError;

/// What the signal handlers ask of the collector.
pub(super) enum Command {
    Stop(&'static str),
    Reload,
}

/// The signals the daemon handles.
pub(super) struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    /// Registers the handlers (from inside the runtime).
    pub(super) fn register() -> Result<Self, DaemonError> {
        let make = |kind| signal(kind).map_err(DaemonError::Runtime);
        Ok(Self {
            term: make(SignalKind::terminate())?,
            int: make(SignalKind::interrupt())?,
            hup: make(SignalKind::hangup())?,
        })
    }

    /// Sends the collector a command per signal (on `tx`, waking it through `wake`) until it
    /// ends: its result.
    pub(super) async fn forward(
        self,
        tx: mpsc::Sender<Command>,
        mut wake: UnixStream,
        worker: std::thread::JoinHandle<Result<(), DaemonError>>,
    ) -> Result<(), DaemonError> {
        let Self {
            mut term,
            mut int,
            mut hup,
        } = self;
        let (end_tx, mut end_rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = end_tx.send(worker.join());
        });
        let mut send = |c: Command| {
            let _ = tx.send(c);
            let _ = wake.write_all(&[1]);
        };
        loop {
            tokio::select! {
                _ = term.recv() => send(Command::Stop("SIGTERM")),
                _ = int.recv() => send(Command::Stop("SIGINT")),
                _ = hup.recv() => send(Command::Reload),
                r = &mut end_rx => break match r {
                    Ok(Ok(r)) => r,
                    Ok(Err(panic)) => Err(DaemonError::CollectorPanicked(
                        panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_default(),
                    )),
                    Err(_) => Err(DaemonError::CollectorVanished),
                },
            }
        }
    }
}
