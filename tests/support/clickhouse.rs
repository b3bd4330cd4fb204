//! A real ClickHouse server for the tests (Debian's `clickhouse-server`), on loopback ports of
//! its own, its data in a scratch folder; loaded with the shipped schema by `clickhouse-client`
//! as docs/export.md loads it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::{Scratch, missing, output, workspace_root};

/// The password of the server's second user, `fabric` (the first, `default`, has none).
pub const FABRIC_PASSWORD: &str = "s3cret pass";

pub struct ClickHouseServer {
    child: Child,
    /// `http://127.0.0.1:PORT` (no user).
    pub url: String,
    tcp_port: u16,
    client: PathBuf,
    /// The server's version, e.g. `18.16.1`.
    pub version: String,
    _dir: Scratch,
}

/// A command from PATH or the system's sbin folders (Debian puts the server in /usr/sbin).
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Two loopback ports nobody listens on now (both held while the second is picked, so they
/// differ).
fn free_ports() -> (u16, u16) {
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (a, b) = (bind(), bind());
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

impl ClickHouseServer {
    /// A new server with the `roce` database of deploy/clickhouse/schema.sql, or None when
    /// `clickhouse-server` or `clickhouse-client` is not installed (a failure under CI).
    pub fn start(test: &str) -> Option<Self> {
        let (Some(server), Some(client)) = (find("clickhouse-server"), find("clickhouse-client"))
        else {
            missing(
                test,
                "clickhouse-server and clickhouse-client are not installed",
            );
            return None;
        };
        // Another process may take a port between its pick and the server's bind: then the
        // server exits saying so, and starts again on others.
        for attempt in 1.. {
            match Self::try_start(&server, &client) {
                Ok(s) => return Some(s),
                Err(log) if attempt < 3 && log.contains("Address already in use") => continue,
                Err(log) => panic!("clickhouse-server exited: {log}"),
            }
        }
        unreachable!()
    }

    /// One start on two new ports: the server loaded with the schema, or its log when it
    /// exited.
    fn try_start(server: &Path, client: &Path) -> Result<Self, String> {
        let dir = Scratch::new("clickhouse");
        let (http_port, tcp_port) = free_ports();
        let data = dir.path("data");
        let config = format!(
            r#"<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><console>1</console></logger>
    <http_port>{http_port}</http_port>
    <tcp_port>{tcp_port}</tcp_port>
    <listen_host>127.0.0.1</listen_host>
    <path>{data}/</path>
    <tmp_path>{data}/tmp/</tmp_path>
    <user_files_path>{data}/user_files/</user_files_path>
    <format_schema_path>{data}/format_schemas/</format_schema_path>
    <mark_cache_size>268435456</mark_cache_size>
    <users_config>users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
</yandex>
"#,
            data = data.display()
        );
        let users = format!(
            r#"<?xml version="1.0"?>
<yandex>
    <profiles><default></default></profiles>
    <users>
        <default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default>
        <fabric><password>{FABRIC_PASSWORD}</password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></fabric>
    </users>
    <quotas><default></default></quotas>
</yandex>
"#
        );
        let config_path = dir.file("config.xml", &config);
        dir.file("users.xml", &users);
        let log = std::fs::File::create(dir.path("server.log")).unwrap();
        let child = Command::new(server)
            .arg(format!("--config-file={}", config_path.display()))
            .current_dir(dir.path(""))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start clickhouse-server");
        let mut s = ClickHouseServer {
            child,
            url: format!("http://127.0.0.1:{http_port}"),
            tcp_port,
            client: client.to_path_buf(),
            version: String::new(),
            _dir: dir,
        };
        // Up when it answers a query (it may take seconds to start).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (status, out, _) = output(
                Command::new(&s.client)
                    .args(["--host", "127.0.0.1", "--port"])
                    .arg(tcp_port.to_string())
                    .args(["--query", "SELECT version()"]),
            );
            if status.success() {
                s.version = out.trim().to_string();
                break;
            }
            if let Some(status) = s.child.try_wait().unwrap() {
                return Err(format!(
                    "({status}) {}",
                    std::fs::read_to_string(s._dir.path("server.log")).unwrap_or_default()
                ));
            }
            assert!(
                std::time::Instant::now() < deadline,
                "clickhouse-server did not answer within 60 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let schema =
            std::fs::read_to_string(workspace_root().join("deploy/clickhouse/schema.sql")).unwrap();
        let schema = schema_for(&s.version, &schema);
        let (status, _, err) = crate::run_with_input(
            Command::new(&s.client)
                .args(["--host", "127.0.0.1", "--port"])
                .arg(tcp_port.to_string())
                .arg("--multiquery"),
            schema.as_bytes(),
        )
        .map(|o| {
            (
                o.status,
                String::new(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .expect("run clickhouse-client");
        assert!(
            status.success(),
            "the schema on ClickHouse {}: {err}",
            s.version
        );
        Ok(s)
    }

    /// A query's answer, as the default user (the text of its default format).
    pub fn query(&self, sql: &str) -> String {
        let (status, out, err) = output(
            Command::new(&self.client)
                .args(["--host", "127.0.0.1", "--port"])
                .arg(self.tcp_port.to_string())
                .args(["--query", sql]),
        );
        assert!(status.success(), "{sql}: {err}");
        out
    }

    /// Loads a records directory's tables, as docs/export.md does: `clickhouse-client --query
    /// "INSERT INTO roce.$t FORMAT JSONEachRow" < $t.jsonl` for each file that is not empty.
    pub fn load(&self, records: &Path) {
        for entry in std::fs::read_dir(records).unwrap() {
            let path = entry.unwrap().path();
            let Some(table) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".jsonl"))
            else {
                continue;
            };
            let data = std::fs::read(&path).unwrap();
            if data.is_empty() {
                continue;
            }
            let out = crate::run_with_input(
                Command::new(&self.client)
                    .args(["--host", "127.0.0.1", "--port"])
                    .arg(self.tcp_port.to_string())
                    .args([
                        "--query",
                        &format!("INSERT INTO roce.{table} FORMAT JSONEachRow"),
                    ]),
                &data,
            )
            .expect("run clickhouse-client");
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// The shipped schema as a server of `version` takes it: before 20.1 (Debian's 18.16)
/// ClickHouse has no DateTime64, no table TTL on a DateTime64 and no LowCardinality by
/// default, so there the partition column is a DateTime, the TTL goes and the columns are
/// plain Strings; every column the records have keeps its name and its values.
pub fn schema_for(version: &str, schema: &str) -> String {
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major >= 20 {
        return schema.to_string();
    }
    let datetime64 =
        "DateTime64(9, 'UTC') MATERIALIZED fromUnixTimestamp64Nano(toInt64(interval_start_ns))";
    assert!(
        schema.contains(datetime64),
        "the schema's partition column changed"
    );
    schema
        .replace(
            datetime64,
            "DateTime('UTC') MATERIALIZED toDateTime(intDiv(interval_start_ns, 1000000000))",
        )
        .replace("LowCardinality(String)", "String")
        .lines()
        .map(|l| {
            if l.starts_with("TTL ") {
                // The statement's end moves to the line before.
                ";"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Drop for ClickHouseServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
