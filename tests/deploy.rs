//! The deployment files under deploy/: the Prometheus rules pass `promtool check rules` and
//! their unit tests, the dashboard's queries parse, the systemd unit verifies and runs as a
//! non-root user with only the capabilities eBPF needs, the Kubernetes manifests parse and keep
//! the DaemonSet on the host network with those capabilities and the probes on /healthz, the
//! example configs parse, and every metric name the rules and the dashboard use is one the
//! daemon exports. The container image built and run (which needs root): privileged/deploy_live.rs.
//!
//! Tools: promtool and systemd-analyze from PATH (`cargo xtask setup` installs promtool), and
//! PyYAML from the virtualenv `target/tools/venv` that setup creates. A missing tool fails the
//! test under CI and skips it loudly otherwise.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
};

use integration_tests::{
    EXPORTED_METRICS, LATENCY_METRICS, NIC_METRICS, PFC_METRICS, Scratch, missing, output, tool,
    workspace_root as root,
};
use serde_json::Value;

/// The keys of the `run --config` TOML file: the long flags in snake_case.
const CONFIG_KEYS: &[&str] = &[
    "iface",
    "mode",
    "consume",
    "interval",
    "listen",
    "max_series",
    "jsonl",
    "log_level",
    "idle_timeout",
    "max_flows",
    "xdp_mode",
    "tc_hook",
    "rdma_devices",
    "netdevs",
    "all_rdma_devices",
];

/// Capabilities every deployment must grant: maps and program load, attaching, and the
/// verifier's privileged mode.
const REQUIRED_CAPS: [&str; 3] = ["BPF", "NET_ADMIN", "PERFMON"];
/// The only other one a deployment may grant: mirror mode's AF_PACKET promiscuous membership.
const OPTIONAL_CAPS: [&str; 1] = ["NET_RAW"];

const METRICS_PORT: u64 = 9477;

fn deploy(rel: &str) -> PathBuf {
    root().join("deploy").join(rel)
}

fn read(rel: &str) -> String {
    let path = deploy(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The tools virtualenv's python with PyYAML, or None (see [`missing`]).
fn venv_python(test: &str) -> Option<PathBuf> {
    let python = root().join("target/tools/venv/bin/python");
    let ok = python.is_file()
        && Command::new(&python)
            .args(["-c", "import yaml"])
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        missing(test, &format!("{} cannot import yaml", python.display()));
        return None;
    }
    Some(python)
}

/// Runs a command, requires success, returns stdout and stderr together.
fn run_ok(cmd: &mut Command) -> String {
    let (status, out, err) = output(cmd);
    assert!(status.success(), "{cmd:?} failed ({status}):\n{out}\n{err}");
    format!("{out}{err}")
}

/// Every YAML document of a file, as JSON (PyYAML's safe loader; empty documents left out).
fn yaml_documents(python: &Path, rel: &str) -> Vec<Value> {
    let script = "import json, sys, yaml\n\
                  docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]\n\
                  json.dump(docs, sys.stdout)\n";
    let path = deploy(rel);
    let (status, out, err) = output(Command::new(python).arg("-c").arg(script).arg(&path));
    assert!(status.success(), "{}: not YAML: {err}", path.display());
    match serde_json::from_str(&out).unwrap() {
        Value::Array(docs) => docs,
        other => panic!("{other}"),
    }
}

/// Identifiers starting with `roce_` (not recording rules, which are `roce:...`): the text
/// scanned by hand, character by character.
fn metric_names(text: &str) -> BTreeSet<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = BTreeSet::new();
    let mut prev: Option<char> = None;
    for (i, c) in text.char_indices() {
        let at_start = prev.is_none_or(|p| !ident(p) && p != ':');
        if at_start && c == 'r' && text[i..].starts_with("roce_") {
            let end = text[i..]
                .find(|c: char| !ident(c))
                .map_or(text.len(), |n| i + n);
            names.insert(text[i..end].to_string());
        }
        prev = Some(c);
    }
    names
}

#[test]
fn metric_scan_finds_names_not_recording_rules() {
    let names = metric_names(
        "rate(roce_bytes_total{x=\"y\"}[5m]) roce:bits:rate1m xroce_no \
         sum(roce_observer_info) roce:a_roce_b",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["roce_bytes_total", "roce_observer_info"]
    );
}

#[test]
fn rules_and_dashboard_use_only_exported_metrics() {
    let known: BTreeSet<&str> = EXPORTED_METRICS
        .iter()
        .chain(LATENCY_METRICS)
        .chain(NIC_METRICS)
        .chain(PFC_METRICS)
        .copied()
        .collect();
    for rel in [
        "prometheus/roce-observer.rules.yml",
        "prometheus/roce-observer.rules.test.yml",
        "grafana/roce-observer.json",
    ] {
        let names = metric_names(&read(rel));
        assert!(names.len() >= 8, "{rel}: only {names:?}");
        let unknown: Vec<&String> = names
            .iter()
            .filter(|n| !known.contains(n.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "{rel} uses metrics the daemon does not export: {unknown:?}"
        );
    }
}

#[test]
fn prometheus_rules_check_and_pass_their_unit_tests() {
    let test = "prometheus_rules_check_and_pass_their_unit_tests";
    let Some(promtool) = tool(test, "promtool") else {
        return;
    };
    let dir = deploy("prometheus");
    let out = run_ok(
        Command::new(&promtool)
            .args(["check", "rules", "roce-observer.rules.yml"])
            .current_dir(&dir),
    );
    assert!(out.contains("SUCCESS"), "{out}");
    let out = run_ok(
        Command::new(&promtool)
            .args(["test", "rules", "roce-observer.rules.test.yml"])
            .current_dir(&dir),
    );
    assert!(out.contains("SUCCESS"), "{out}");

    // Each alert carries the labels and annotations the routing and the notifications use.
    let rules = read("prometheus/roce-observer.rules.yml");
    let alerts = rules.matches("- alert: ").count();
    assert!(alerts >= 10, "{alerts} alerts");
    for key in ["for: ", "severity: ", "summary: ", "description: "] {
        assert_eq!(
            rules.matches(key).count(),
            alerts,
            "every alert has `{key}`"
        );
    }
    for alert in [
        "RoCECeMarksWithoutCnp",
        "RoCEHighCeFraction",
        "RoCENakRate",
        "RoCEPsnLost",
        "RoCERnrNaks",
        "RoCEEcmpImbalance",
        "RoCEObserverDown",
        "RoCEObserverInterfaceDetached",
        "RoCEObserverFlowTableFull",
        "RoCENicFirmwareMismatch",
        "RoCENicDriverVersionMismatch",
        "RoCENicPauseShare",
        "RoCENicTransportErrors",
        "RoCENicPauseStorm",
        "RoCENicSourceDown",
    ] {
        assert!(rules.contains(&format!("- alert: {alert}\n")), "{alert}");
        assert!(
            read("prometheus/roce-observer.rules.test.yml")
                .contains(&format!("alertname: {alert}\n")),
            "no unit test of {alert}"
        );
    }
}

/// The panels of a dashboard, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        all.push(p);
        if let Some(nested) = p["panels"].as_array() {
            all.extend(nested);
        }
    }
    all
}

#[test]
fn grafana_dashboard_is_complete() {
    let text = read("grafana/roce-observer.json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);
    assert!(!dashboard["uid"].as_str().unwrap().is_empty());

    let vars = dashboard["templating"]["list"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    for name in ["instance", "iface"] {
        assert_eq!(var(name)["type"], "query");
        assert!(
            var(name)["definition"]
                .as_str()
                .unwrap()
                .starts_with("label_values("),
            "{name}"
        );
    }

    let mut ids = BTreeSet::new();
    let mut exprs = 0;
    for p in panels(&dashboard) {
        let title = p["title"].as_str().unwrap_or_default();
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate id: {title}"
        );
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().filter(|t| !t.is_empty());
        let targets = targets.unwrap_or_else(|| panic!("panel '{title}' has no targets"));
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "panel '{title}': empty query");
            exprs += 1;
        }
    }
    assert!(exprs >= 20, "{exprs} queries");

    for want in [
        "roce_bytes_total",
        "roce_op_packets_total",
        "roce_qp_psn_gaps_total",
        "roce_observer_drain_seconds",
        "roce_observer_flow_table_fill_ratio",
        "roce_observer_flow_evictions_total",
        "roce_observer_cpu_seconds_total",
        "roce_observer_resident_memory_bytes",
        "roce_observer_interface_attached",
    ] {
        assert!(text.contains(want), "the dashboard shows no {want}");
    }
    assert!(text.contains(r#"topk("#) && text.contains(r#"qp!=\"rest\""#));
}

/// Every dashboard query parses as PromQL: they are checked by promtool as recording rules
/// (with Grafana's `$__rate_interval` as 5m; `$instance` inside a regex is a valid regex).
#[test]
fn grafana_queries_parse() {
    let test = "grafana_queries_parse";
    let Some(promtool) = tool(test, "promtool") else {
        return;
    };
    let dashboard: Value = serde_json::from_str(&read("grafana/roce-observer.json")).unwrap();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let mut n = 0;
    let mut add = |expr: &str| {
        let expr = expr.replace("$__rate_interval", "5m");
        rules.push_str(&format!(
            "      - record: dashboard:query_{n}\n        expr: {}\n",
            serde_json::to_string(&expr).unwrap()
        ));
        n += 1;
    };
    for p in panels(&dashboard) {
        for t in p["targets"].as_array().into_iter().flatten() {
            add(t["expr"].as_str().unwrap());
        }
    }
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(def) = v["definition"].as_str() {
            // label_values(SELECTOR, label): the selector.
            let inner = def
                .strip_prefix("label_values(")
                .and_then(|s| s.rsplit_once(','))
                .map(|(sel, _)| sel)
                .unwrap_or_else(|| panic!("{def}"));
            add(inner);
        }
    }
    let scratch = Scratch::new("deploy-grafana");
    let file = scratch.file("dashboard.rules.yml", &rules);
    let out = run_ok(Command::new(promtool).arg("check").arg("rules").arg(&file));
    assert!(out.contains(&format!("SUCCESS: {n} rules found")), "{out}");
}

/// `key=value` lines of a unit's [Service] section (repeated keys joined by a space).
fn unit_service(unit: &str) -> BTreeMap<String, String> {
    let mut section = "";
    let mut keys: BTreeMap<String, String> = BTreeMap::new();
    for line in unit.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section != "[Service]" {
            continue;
        }
        let (k, v) = line.split_once('=').expect("key=value");
        let entry = keys.entry(k.trim().to_string()).or_default();
        if !entry.is_empty() {
            entry.push(' ');
        }
        entry.push_str(v.trim());
    }
    keys
}

/// Checks a set of capability names (without CAP_): the required ones, and nothing beyond the
/// optional ones.
fn check_caps(what: &str, caps: &BTreeSet<String>) {
    for cap in REQUIRED_CAPS {
        assert!(caps.contains(cap), "{what}: {cap} missing from {caps:?}");
    }
    for cap in caps {
        assert!(
            REQUIRED_CAPS.contains(&cap.as_str()) || OPTIONAL_CAPS.contains(&cap.as_str()),
            "{what}: {cap} is more than eBPF needs"
        );
    }
}

#[test]
fn systemd_unit_is_unprivileged_and_verifies() {
    let unit = read("systemd/roce-observer.service");
    let service = unit_service(&unit);
    let key = |k: &str| {
        service
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {k}= in [Service]"))
    };
    assert_eq!(
        key("ExecStart"),
        "/usr/local/bin/roce-observer run --config /etc/roce-observer/config.toml"
    );
    assert_eq!(key("ExecReload"), "/bin/kill -HUP $MAINPID");
    let user = key("User");
    assert!(!["", "root", "0"].contains(&user), "User={user}");
    assert_eq!(key("DynamicUser"), "no");
    assert_eq!(key("NoNewPrivileges"), "yes");
    assert_eq!(key("LimitMEMLOCK"), "infinity");
    assert_eq!(key("ProtectSystem"), "strict");
    let caps = |k: &str| -> BTreeSet<String> {
        key(k)
            .split_whitespace()
            .map(|c| {
                c.strip_prefix("CAP_")
                    .unwrap_or_else(|| panic!("{k}: {c}"))
                    .to_string()
            })
            .collect()
    };
    check_caps("AmbientCapabilities", &caps("AmbientCapabilities"));
    assert_eq!(
        caps("AmbientCapabilities"),
        caps("CapabilityBoundingSet"),
        "the bounding set is what the process is given, nothing more"
    );
    let families: Vec<&str> = key("RestrictAddressFamilies").split_whitespace().collect();
    for family in ["AF_INET", "AF_INET6", "AF_NETLINK", "AF_PACKET", "AF_UNIX"] {
        assert!(families.contains(&family), "{family}");
    }

    // The example config's jsonl file is in the one writable directory.
    let config: toml::Table = read("systemd/config.toml").parse().unwrap();
    let jsonl = config["jsonl"].as_str().expect("the example writes jsonl");
    let logs = format!("/var/log/{}/", key("LogsDirectory"));
    assert!(jsonl.starts_with(&logs), "{jsonl} is outside {logs}");

    // The sysusers snippet creates that user.
    let sysusers = read("systemd/roce-observer.sysusers");
    assert!(
        sysusers
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["u", user])),
        "{sysusers}"
    );

    let test = "systemd_unit_is_unprivileged_and_verifies";
    let Some(analyze) = tool(test, "systemd-analyze") else {
        return;
    };
    // /usr/local/bin/roce-observer is not installed here: verify a copy that runs the CLI
    // built for the tests. Warnings (unknown keys, bad values) do not change the exit status,
    // so the output must not mention the unit at all.
    let scratch = Scratch::new("deploy-systemd");
    let cli = env!("CARGO_BIN_EXE_roce-observer-under-test");
    let copy = scratch.file(
        "roce-observer.service",
        &unit.replace("/usr/local/bin/roce-observer run", &format!("{cli} run")),
    );
    let out = run_ok(Command::new(&analyze).arg("verify").arg(&copy));
    let complaints: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("roce-observer.service"))
        .collect();
    assert!(complaints.is_empty(), "systemd-analyze verify:\n{out}");

    // The hardening as systemd rates it: "OK" (below 5 of 10) or better.
    let out = run_ok(
        Command::new(&analyze)
            .args(["security", "--offline=yes", "--no-pager"])
            .arg(&copy),
    );
    let level = out
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for roce-observer.service: "))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{out}"));
    assert!(level < 5.0, "exposure {level}:\n{out}");

    if let Some(sysusers) = tool(test, "systemd-sysusers") {
        let dry = scratch.path("sysroot");
        let out = run_ok(
            Command::new(sysusers)
                .arg(format!("--root={}", dry.display()))
                .arg("--dry-run")
                .arg(deploy("systemd/roce-observer.sysusers")),
        );
        assert!(
            out.contains(&format!("Creating user '{user}'")),
            "systemd-sysusers --dry-run:\n{out}"
        );
    }
}

/// A `run --config` file: known keys only, and values the daemon accepts.
fn check_config(what: &str, text: &str) -> toml::Table {
    let config: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("{what}: not TOML: {e}"));
    for k in config.keys() {
        assert!(CONFIG_KEYS.contains(&k.as_str()), "{what}: unknown key {k}");
    }
    // The daemon's own loader takes it (what it would say at start, short of the host).
    let scratch = Scratch::new("deploy-config");
    let file = scratch.file("config.toml", text);
    observer_daemon::RunConfig::load(&observer_daemon::RunOverrides {
        config: Some(file),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{what}: the daemon refuses it: {e}"));
    if let Some(mode) = config.get("mode") {
        assert!(
            ["host", "mirror"].contains(&mode.as_str().unwrap()),
            "{what}"
        );
    }
    for k in ["interval", "idle_timeout"] {
        if let Some(v) = config.get(k) {
            roce_observer::units::parse_duration(v.as_str().unwrap())
                .unwrap_or_else(|e| panic!("{what}: {k}: {e}"));
        }
    }
    if let Some(listen) = config.get("listen") {
        listen
            .as_str()
            .unwrap()
            .parse::<SocketAddr>()
            .unwrap_or_else(|e| panic!("{what}: listen: {e}"));
    }
    for k in ["max_series", "max_flows"] {
        if let Some(v) = config.get(k) {
            assert!(v.as_integer().is_some_and(|n| n > 0), "{what}: {k}");
        }
    }
    config
}

#[test]
fn example_config_parses() {
    let config = check_config("deploy/systemd/config.toml", &read("systemd/config.toml"));
    assert!(config["iface"].as_array().is_some_and(|i| !i.is_empty()));
    for k in [
        "iface",
        "mode",
        "interval",
        "listen",
        "max_series",
        "jsonl",
        "log_level",
        "idle_timeout",
    ] {
        assert!(config.contains_key(k), "the example shows {k}");
    }
}

/// The one document of `kind`.
fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn kubernetes_daemonset_is_host_network_with_ebpf_capabilities_only() {
    let test = "kubernetes_daemonset_is_host_network_with_ebpf_capabilities_only";
    let Some(python) = venv_python(test) else {
        return;
    };
    let docs = yaml_documents(&python, "kubernetes/daemonset.yaml");
    for d in &docs {
        assert!(
            d["metadata"].get("namespace").is_none(),
            "namespace-less manifests: {}",
            d["kind"]
        );
    }
    let ds = kind(&docs, "DaemonSet");
    assert_eq!(ds["apiVersion"], "apps/v1");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert!(pod["terminationGracePeriodSeconds"].as_u64().is_some());
    assert!(!pod["tolerations"].as_array().unwrap().is_empty());
    let sa = kind(&docs, "ServiceAccount");
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);

    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];

    let sc = &c["securityContext"];
    assert_eq!(sc["runAsUser"], 0);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["privileged"], false);
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    let added: BTreeSet<String> = strings(&sc["capabilities"]["add"])
        .into_iter()
        .map(String::from)
        .collect();
    check_caps("capabilities.add", &added);

    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], "/healthz", "{probe}");
        assert_eq!(get["port"].as_u64(), Some(METRICS_PORT), "{probe}");
    }
    assert!(
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["containerPort"].as_u64() == Some(METRICS_PORT))
    );
    for side in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(c["resources"][side][r].is_string(), "resources.{side}.{r}");
        }
    }

    // `run --config FILE --listen ADDR`, ADDR the pod (= node) IP from the downward API.
    let args = strings(&c["args"]);
    assert_eq!(args.first(), Some(&"run"), "{args:?}");
    let flag = |name: &str| {
        args.iter()
            .position(|a| *a == name)
            .and_then(|i| args.get(i + 1))
            .copied()
            .unwrap_or_else(|| panic!("no {name} VALUE in {args:?}"))
    };
    let listen = flag("--listen");
    for loopback in ["127.", "localhost", "[::1]", "::1"] {
        assert!(!listen.starts_with(loopback), "--listen {listen}");
    }
    assert_eq!(listen, format!("$(POD_IP):{METRICS_PORT}"));
    let pod_ip = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "POD_IP")
        .expect("POD_IP in env");
    assert_eq!(pod_ip["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");

    // The config file comes from the ConfigMap, mounted where --config points.
    let config_path = Path::new(flag("--config"));
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| config_path.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("a volume mounted at the --config directory");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    let cm = kind(&docs, "ConfigMap");
    assert_eq!(volume["configMap"]["name"], cm["metadata"]["name"]);
    let file = config_path.file_name().unwrap().to_str().unwrap();
    let config = check_config(
        "the ConfigMap's config",
        cm["data"][file]
            .as_str()
            .expect("the config file in the ConfigMap"),
    );
    assert!(config["iface"].as_array().is_some_and(|i| !i.is_empty()));

    // The Service selects the pods and names the port the ServiceMonitor scrapes.
    let svc = kind(&docs, "Service");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "Service selector {k}");
    }
    let port = &svc["spec"]["ports"][0];
    assert_eq!(port["port"].as_u64(), Some(METRICS_PORT));
    let monitor = yaml_documents(&python, "kubernetes/servicemonitor.yaml");
    let monitor = kind(&monitor, "ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], port["name"]);
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "ServiceMonitor selector {k}"
        );
    }
}

/// The DaemonSet for offload hosts: the NIC side alone (its config names no interface and no
/// capture, and the daemon's loader takes it as such), as nobody with every capability dropped
/// and none added, on the host network.
#[test]
fn kubernetes_nic_daemonset_attaches_nothing_without_capabilities() {
    let test = "kubernetes_nic_daemonset_attaches_nothing_without_capabilities";
    let Some(python) = venv_python(test) else {
        return;
    };
    let docs = yaml_documents(&python, "kubernetes/daemonset-nic.yaml");
    let ds = kind(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    // RDMA netlink lists the QPs of processes the caller's PID namespace sees.
    assert_eq!(pod["hostPID"], true);
    let c = &pod["containers"].as_array().unwrap()[0];
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsUser"], 65534);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert!(
        sc["capabilities"].get("add").is_none(),
        "no capability added"
    );
    let cm = kind(&docs, "ConfigMap");
    let text = cm["data"]["config.toml"].as_str().unwrap();
    check_config("the NIC DaemonSet's config", text);
    let scratch = Scratch::new("deploy-nic-config");
    let config = observer_daemon::RunConfig::load(&observer_daemon::RunOverrides {
        config: Some(scratch.file("config.toml", text)),
        ..Default::default()
    })
    .unwrap();
    assert!(config.nic_only() && config.all_rdma_devices, "{config:?}");
    let args = strings(&c["args"]);
    assert_eq!(
        args[..3],
        ["run", "--config", "/etc/roce-observer/config.toml"]
    );
    let svc = kind(&docs, "Service");
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&ds["spec"]["template"]["metadata"]["labels"][k], v);
    }
}

/// The stages of `deploy/Containerfile`: (FROM line's image, stage name, its lines).
fn containerfile_stages() -> Vec<(String, String, Vec<String>)> {
    let mut stages: Vec<(String, String, Vec<String>)> = Vec::new();
    let text = read("Containerfile");
    // Continuation lines joined.
    let joined = text.replace("\\\n", " ");
    for line in joined.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words[0] == "FROM" {
            let name = match words.as_slice() {
                [_, _, as_, name] if as_.eq_ignore_ascii_case("as") => name.to_string(),
                _ => String::new(),
            };
            stages.push((words[1].to_string(), name, Vec::new()));
        } else {
            stages
                .last_mut()
                .expect("a FROM first")
                .2
                .push(line.to_string());
        }
    }
    stages
}

/// The image: a build stage that builds the release binary as the repository does (`cargo
/// xtask release`: the nightly, bpf-linker, `--locked`), a slim runtime stage with only the
/// binary and libpcap, run as nobody; its entrypoint is the one both DaemonSets run.
#[test]
fn containerfile_is_multi_stage_with_the_binary_on_a_slim_base() {
    let stages = containerfile_stages();
    assert_eq!(stages.len(), 2, "{stages:?}");
    let (build_image, build, build_lines) = &stages[0];
    assert!(build_image.contains("rust:"), "{build_image}");
    assert_eq!(build, "build");
    assert!(build_lines.iter().any(|l| l == "RUN cargo xtask release"));
    let (runtime_image, _, lines) = &stages[1];
    assert!(runtime_image.ends_with("-slim"), "{runtime_image}");
    assert!(
        lines.iter().any(|l| l
            == "COPY --from=build /src/target/release/roce-observer /usr/local/bin/roce-observer"),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("libpcap0.8")));
    assert!(lines.iter().any(|l| l == "USER 65534:65534"));
    assert!(
        lines
            .iter()
            .any(|l| l == r#"ENTRYPOINT ["/usr/local/bin/roce-observer"]"#)
    );
    // The build context leaves the build outputs out (for podman and docker alike).
    for ignore in [".containerignore", ".dockerignore"] {
        let text = std::fs::read_to_string(root().join(ignore)).unwrap();
        assert!(text.lines().any(|l| l.trim() == "target"), "{ignore}");
    }
    // Both DaemonSets run that entrypoint, and name the image deploy/Containerfile builds.
    let Some(python) = venv_python("containerfile_is_multi_stage_with_the_binary_on_a_slim_base")
    else {
        return;
    };
    for file in ["kubernetes/daemonset.yaml", "kubernetes/daemonset-nic.yaml"] {
        let docs = yaml_documents(&python, file);
        let c = &kind(&docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            strings(&c["command"]),
            ["/usr/local/bin/roce-observer"],
            "{file}"
        );
        assert!(read(file).contains("deploy/Containerfile"), "{file}");
    }
}
