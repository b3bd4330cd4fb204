//! Evidence from the fleet's Prometheus server (`fabric --prometheus`): each QP's packets,
//! losses and CE marks over a window, as the sidecars' per-QP counters' increases, through the
//! HTTP API's instant queries (`/api/v1/query`).

use std::time::Duration;

use crate::analysis::fabric::{
    FabricError, PROMETHEUS_COUNTERS, SidecarEvidence, prometheus_evidence,
};

#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("Prometheus at {url}: {query}: {detail}")]
    Query {
        url: String,
        query: String,
        detail: String,
    },
    #[error(transparent)]
    Evidence(#[from] FabricError),
}

/// PromQL's duration for `window` (whole seconds, at least one).
fn promql_duration(window: Duration) -> String {
    format!("{}s", window.as_secs().max(1))
}

/// One instant query's `data.result`.
fn query(
    agent: &ureq::Agent,
    url: &str,
    promql: &str,
    at: Option<f64>,
) -> Result<serde_json::Value, PrometheusError> {
    let fail = |detail: String| PrometheusError::Query {
        url: url.into(),
        query: promql.into(),
        detail,
    };
    let endpoint = format!("{}/api/v1/query", url.trim_end_matches('/'));
    let mut req = agent.get(&endpoint).query("query", promql);
    if let Some(t) = at {
        req = req.query("time", format!("{t:.3}"));
    }
    let mut resp = req.call().map_err(|e| fail(e.to_string()))?;
    let status = resp.status();
    let text = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| fail(format!("HTTP {status}: {e}")))?;
    let body: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| fail(format!("HTTP {status}, not the API's JSON: {e}")))?;
    if body.get("status").and_then(serde_json::Value::as_str) != Some("success") {
        let why = body
            .get("error")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("no error given");
        return Err(fail(format!("HTTP {status}: {why}")));
    }
    body.get("data")
        .and_then(|d| d.get("result"))
        .cloned()
        .ok_or_else(|| fail("no data.result".into()))
}

/// The QPs' evidence over `window` ending at `at` (unix seconds; the server's now when none),
/// from the server at `url` (`http://host:9090`); `selector` narrows the series (PromQL label
/// matchers without braces, e.g. `job="roce"`).
pub fn evidence(
    url: &str,
    window: Duration,
    at: Option<f64>,
    selector: Option<&str>,
    timeout: Duration,
) -> Result<SidecarEvidence, PrometheusError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let matchers = selector.map_or(String::new(), |s| format!("{{{s}}}"));
    let mut results = Vec::with_capacity(PROMETHEUS_COUNTERS.len());
    for family in PROMETHEUS_COUNTERS {
        let promql = format!("increase({family}{matchers}[{}])", promql_duration(window));
        results.push(query(&agent, url, &promql, at)?);
    }
    Ok(prometheus_evidence(
        [&results[0], &results[1], &results[2], &results[3]],
        url,
    )?)
}
