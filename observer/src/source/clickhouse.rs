//! The fleet's ClickHouse server as a source (`fabric --clickhouse`): a records table's rows
//! over a span of time, through the HTTP interface, as JSONEachRow lines (what a records
//! file holds, so the analysis reads them with the files' readers:
//! `analysis::fabric::records_windows` and its kin).

use std::io::BufRead;
use std::time::Duration;

use base64::Engine as _;

#[derive(Debug, thiserror::Error)]
pub enum ClickHouseError {
    #[error("ClickHouse at {url}: {detail}")]
    Url { url: String, detail: String },
    #[error("ClickHouse at {url}: {table}: {detail}")]
    Query {
        url: String,
        table: String,
        detail: String,
    },
}

/// A ClickHouse server's HTTP interface (`http://host:8123`), the user and password taken from
/// the address (`http://user:password@host:8123`), else from `CLICKHOUSE_USER` and
/// `CLICKHOUSE_PASSWORD`, else the server's default user. Errors never show the password.
#[derive(Clone)]
pub struct ClickHouse {
    /// The address without its user and password.
    url: String,
    database: String,
    authorization: Option<String>,
    agent: ureq::Agent,
}

impl std::fmt::Debug for ClickHouse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouse")
            .field("url", &self.url)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

/// Whether `name` may stand unquoted in SQL as a database name (letters, digits and `_`, not
/// starting with a digit): the only names taken, so none needs quoting.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `url` split into the address without its user information and that information, decoded:
/// (address, user, password).
fn split_userinfo(url: &str) -> Result<(String, Option<String>, Option<String>), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("not an http:// or https:// address".into());
    };
    if scheme != "http" && scheme != "https" {
        return Err(format!("the scheme {scheme}:// is not http:// or https://"));
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        if authority.is_empty() {
            return Err("no host".into());
        }
        // A password with an unencoded `/`, `?` or `#` ends the host early: its rest would
        // show in every message.
        if path.contains('@') {
            return Err(
                "an @ after the host: percent-encode the user and password (%2F for /, %3F for ?, \
                 %23 for #, %40 for @), or give them in CLICKHOUSE_USER and CLICKHOUSE_PASSWORD"
                    .into(),
            );
        }
        return Ok((url.to_string(), None, None));
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| "the user or password is not UTF-8 once decoded".to_string())
    };
    let (user, password) = match userinfo.split_once(':') {
        Some((u, p)) => (decode(u)?, Some(decode(p)?)),
        None => (decode(userinfo)?, None),
    };
    Ok((format!("{scheme}://{host}{path}"), Some(user), password))
}

impl ClickHouse {
    /// The server at `url`, its records in `database` (the schema's is `roce`); `timeout` bounds
    /// each query (the server answers once it has ended), and the rows' transfer after it.
    pub fn new(url: &str, database: &str, timeout: Duration) -> Result<Self, ClickHouseError> {
        let (address, user, password) =
            split_userinfo(url).map_err(|detail| ClickHouseError::Url {
                url: split_userinfo(url).map_or_else(|_| "the address given".into(), |s| s.0),
                detail,
            })?;
        if !is_identifier(database) {
            return Err(ClickHouseError::Url {
                url: address,
                detail: format!(
                    "the database name {database:?} is not a plain name (letters, digits, _)"
                ),
            });
        }
        let user = user.or_else(|| std::env::var("CLICKHOUSE_USER").ok());
        let password = password.or_else(|| std::env::var("CLICKHOUSE_PASSWORD").ok());
        // HTTP basic authentication: what every ClickHouse version's HTTP interface takes.
        let authorization = match (user, password) {
            (None, None) => None,
            (user, password) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!(
                    "{}:{}",
                    user.as_deref().unwrap_or("default"),
                    password.as_deref().unwrap_or("")
                ))
            )),
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT.min(timeout)))
            .timeout_recv_response(Some(timeout))
            .timeout_recv_body(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(ClickHouse {
            url: address,
            database: database.to_string(),
            authorization,
            agent,
        })
    }

    /// The address, without user or password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The query reading `table`'s rows whose interval started in `[start_ns, end_ns)`, each
    /// row once however often it was inserted (an exporter's row is its exporter and sequence
    /// number; a retried or reloaded insert repeats them).
    pub fn records_query(&self, table: &str, start_ns: u64, end_ns: u64) -> String {
        records_query(&self.database, table, start_ns, end_ns)
    }

    /// `table`'s rows whose interval started in `[start_ns, end_ns)`, as JSONEachRow lines,
    /// streamed as the server sends them. A server's error is the error, with its first line.
    pub fn records(
        &self,
        table: &str,
        start_ns: u64,
        end_ns: u64,
    ) -> Result<impl BufRead + use<>, ClickHouseError> {
        let fail = |detail: String| ClickHouseError::Query {
            url: self.url.clone(),
            table: format!("{}.{table}", self.database),
            detail,
        };
        let sql = self.records_query(table, start_ns, end_ns);
        // `wait_end_of_query`: the server sends nothing before the query has ended, so an
        // error midway is the answer's status and words, never rows cut short.
        let mut req = self
            .agent
            .post(&self.url)
            .query("wait_end_of_query", "1")
            .header("Content-Type", "text/plain; charset=utf-8");
        if let Some(a) = &self.authorization {
            req = req.header("Authorization", a);
        }
        let resp = req.send(sql.as_bytes()).map_err(|e| fail(e.to_string()))?;
        let status = resp.status();
        let body = resp.into_body();
        if !status.is_success() {
            // The server's words: the first line of its answer's first 64 KiB.
            let mut bytes = Vec::new();
            let _ = std::io::Read::read_to_end(
                &mut std::io::Read::take(body.into_reader(), 64 * 1024),
                &mut bytes,
            );
            let text = String::from_utf8_lossy(&bytes);
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            let first: String = first.trim().chars().take(400).collect();
            return Err(fail(format!(
                "HTTP {status}: {}",
                if first.is_empty() {
                    "no error given"
                } else {
                    &first
                }
            )));
        }
        Ok(std::io::BufReader::with_capacity(
            1 << 16,
            body.into_reader(),
        ))
    }
}

/// How long connecting to the server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The query reading `database.table`'s rows whose interval started in `[start_ns, end_ns)`,
/// each (host, exporter, sequence number) once, as JSONEachRow lines. The schema's partition
/// column (`interval_start`, whole days) is bounded too, in whole seconds around the span, so
/// the server reads only the days the span touches.
pub fn records_query(database: &str, table: &str, start_ns: u64, end_ns: u64) -> String {
    // (DateTime ends in 2106: a span beyond it is bounded there.)
    let seconds = |ns: u64| (ns / 1_000_000_000).min(u64::from(u32::MAX));
    let (first, last) = (
        seconds(start_ns),
        seconds(end_ns.saturating_add(999_999_999)),
    );
    format!(
        "SELECT * FROM {database}.{table} \
         WHERE interval_start >= toDateTime({first}, 'UTC') \
         AND interval_start <= toDateTime({last}, 'UTC') \
         AND interval_start_ns >= {start_ns} AND interval_start_ns < {end_ns} \
         LIMIT 1 BY host, exporter, seq FORMAT JSONEachRow"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_and_password_leave_the_address() {
        assert_eq!(
            split_userinfo("http://fabric:s%40cret@ch.example:8123/").unwrap(),
            (
                "http://ch.example:8123/".into(),
                Some("fabric".into()),
                Some("s@cret".into())
            )
        );
        assert_eq!(
            split_userinfo("https://ro@ch:8443").unwrap(),
            ("https://ch:8443".into(), Some("ro".into()), None)
        );
        assert_eq!(
            split_userinfo("http://ch:8123/?x=ab").unwrap(),
            ("http://ch:8123/?x=ab".into(), None, None)
        );
        // (An @ after the host may be a password's end: refused rather than shown.)
        assert!(split_userinfo("http://ch:8123/?x=a@b").is_err());
        assert!(split_userinfo("ch:8123").is_err());
        assert!(split_userinfo("ftp://ch").is_err());
        assert!(split_userinfo("http://u:p@").is_err());
        assert!(split_userinfo("http://").is_err());
        // An unencoded / in the password: refused, nothing of it shown.
        let e = ClickHouse::new("http://u:pa/ss@ch:8123", "roce", Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("ss@") && !e.contains("pa/"), "{e}");
        assert!(e.contains("percent-encode"), "{e}");
    }

    #[test]
    fn errors_never_show_the_password() {
        let e = ClickHouse::new(
            "http://u:hunter2@ch:8123",
            "roce; DROP",
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(
            !e.contains("hunter2") && e.contains("http://ch:8123"),
            "{e}"
        );
        let e = ClickHouse::new("gopher://u:hunter2@ch", "roce", Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn only_plain_database_names() {
        for ok in ["roce", "_x1", "Fleet_2"] {
            assert!(is_identifier(ok), "{ok}");
        }
        for bad in ["", "1x", "a.b", "a b", "a`", "roce;"] {
            assert!(!is_identifier(bad), "{bad}");
        }
    }
}
