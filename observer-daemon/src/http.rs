//! The HTTP endpoints: `/metrics` (OpenMetrics or the Prometheus text format, as the scraper
//! asks) and `/healthz` (stale when drains stop coming).

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU64, Ordering},
};

use super::{DaemonError, openmetrics::Exposition};

/// Shared between the collector and the HTTP handlers.
pub(super) struct Health {
    /// CLOCK_MONOTONIC ns of the last drain (or of the start).
    pub(super) last_drain_ns: AtomicU64,
    pub(super) interval_ns: AtomicU64,
}

impl Health {
    /// Healthy while drains keep coming: at most two intervals and 10 s late.
    fn check(&self) -> Result<(), String> {
        let age = roce_observer::source::live::monotonic_ns()
            .saturating_sub(self.last_drain_ns.load(Ordering::Relaxed));
        let limit = 2 * self.interval_ns.load(Ordering::Relaxed) + 10_000_000_000;
        if age <= limit {
            Ok(())
        } else {
            Err(format!(
                "stale: the last drain of the kernel maps was {:.1} s ago",
                age as f64 / 1e9
            ))
        }
    }
}

/// The endpoints' routes.
fn router(exposition: Arc<Mutex<Arc<Exposition>>>, health: Arc<Health>) -> axum::Router {
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get({
                let exposition = exposition.clone();
                move |headers: axum::http::HeaderMap| async move { scrape(&exposition, &headers) }
            }),
        )
        .route(
            "/healthz",
            axum::routing::get({
                let health = health.clone();
                move || async move {
                    match health.check() {
                        Ok(()) => (axum::http::StatusCode::OK, "ok\n".to_string()),
                        Err(e) => (axum::http::StatusCode::SERVICE_UNAVAILABLE, e + "\n"),
                    }
                }
            }),
        )
        .route(
            "/",
            axum::routing::get(|| async {
                "roce-observer: /metrics (OpenMetrics or Prometheus text), /healthz\n"
            }),
        )
}

/// The endpoints served on a runtime task until [`Server::stop`].
pub(super) struct Server {
    done: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Serves on `listener` (from inside the runtime).
    pub(super) fn start(
        listener: std::net::TcpListener,
        exposition: Arc<Mutex<Arc<Exposition>>>,
        health: Arc<Health>,
    ) -> Result<Self, DaemonError> {
        let app = router(exposition, health);
        let listener = tokio::net::TcpListener::from_std(listener).map_err(DaemonError::Runtime)?;
        let (done, done_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = done_rx.await;
                })
                .await
        });
        Ok(Self { done, task })
    }

    /// Stops serving (requests under way are answered first).
    pub(super) async fn stop(self) {
        let _ = self.done.send(());
        let _ = self.task.await;
    }
}

fn scrape(
    exposition: &Mutex<Arc<Exposition>>,
    headers: &axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::{http::header::CONTENT_TYPE, response::IntoResponse};
    let openmetrics = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    let Ok(e) = exposition.lock().map(|e| e.clone()) else {
        return (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics are unavailable\n",
        )
            .into_response();
    };
    if openmetrics {
        (
            [(
                CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            e.openmetrics.clone(),
        )
            .into_response()
    } else {
        (
            [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
            e.prometheus_text.clone(),
        )
            .into_response()
    }
}
