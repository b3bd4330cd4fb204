//! The fleet's Prometheus server as a source (`fabric --prometheus`): counters' increases over
//! a window, through the HTTP API's instant queries (`/api/v1/query`), as the API returns
//! them (the analysis reads them: `analysis::fabric::prometheus_evidence`).

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("Prometheus at {url}: {query}: {detail}")]
    Query {
        url: String,
        query: String,
        detail: String,
    },
}

/// PromQL's duration for `window`: whole seconds, or milliseconds when it is not (at least
/// one).
fn promql_duration(window: Duration) -> String {
    if window.subsec_nanos() == 0 {
        format!("{}s", window.as_secs().max(1))
    } else {
        format!("{}ms", window.as_millis().max(1))
    }
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

/// Each of `families`' increase over `window` ending at `at` (unix seconds; the server's now
/// when none), from the server at `url` (`http://host:9090`), as the `data.result` vectors;
/// `selector` narrows the series (PromQL label matchers without braces, e.g. `job="roce"`).
pub fn increases(
    url: &str,
    families: &[&str],
    window: Duration,
    at: Option<f64>,
    selector: Option<&str>,
    timeout: Duration,
) -> Result<Vec<serde_json::Value>, PrometheusError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let matchers = selector.map_or(String::new(), |s| format!("{{{s}}}"));
    families
        .iter()
        .map(|family| {
            let promql = format!("increase({family}{matchers}[{}])", promql_duration(window));
            query(&agent, url, &promql, at)
        })
        .collect()
}
