//! `roce-observer run --otlp-endpoint`: every interval's fleet records from the sidecar, live on a
//! lab veth, to the test receiver on the official protobufs (in the lab's namespace).
//! - Thousands of QPs (more than the kernel's flow cache has slots, so that write-backs, drains
//!   that read only the logged keys, and flows aged out while traffic goes on all happen): per
//!   QP, the rows of all intervals sum to what the generator sent; intervals and each table's
//!   rows are numbered without gaps, each interval's own row counts its rows in every table.
//! - The receiver killed for a while and started again: nothing lost within the send buffer;
//!   with a buffer too small for the outage, the records the sidecar says it dropped are exactly
//!   the ones the receiver lacks.
//! - A receiver answering slowly or failing every request: `/metrics` answers, the drains go on
//!   at their interval, and the counts stay exact.

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use integration_tests::{
    LoggedChild, OtlpReceiver, Sample, Scratch, output, parse_exposition, require_root, sample_sum,
    send_frames,
};
use observer_common::{FlowKey, FlowStats, OpClass, wire};
use roce_observer::{
    lab::{Lab, Netns},
    source::synth::{self, Ip, QpStream, Workload, host_mac},
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");
const PORT: u16 = 9477;

/// `run ARGS` in `ns`, once it has attached.
fn start_sidecar(ns: &Netns, args: &[&str]) -> LoggedChild {
    let mut cmd = ns.command(CLI);
    cmd.arg("run").args(args);
    let s = LoggedChild::spawn(cmd);
    s.wait_log("attached; serving", Duration::from_secs(20));
    s
}

/// /metrics in `ns`, parsed; `None` when it does not answer within `timeout`.
fn scrape_within(ns: &Netns, timeout: Duration) -> Option<Vec<Sample>> {
    let body = ns
        .run_in(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", PORT))?;
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))?;
            s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok::<_, std::io::Error>(out)
        })
        .unwrap()
        .ok()?;
    let (_, body) = body.split_once("\r\n\r\n")?;
    let samples = parse_exposition(body, false);
    integration_tests::assert_in_registry(&samples);
    Some(samples)
}

fn scrape(ns: &Netns) -> Vec<Sample> {
    scrape_within(ns, Duration::from_secs(10)).expect("GET /metrics")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("a number: {v}"))
}

/// The counts compared per QP: the record's attribute and the generator's field.
type Field = fn(&FlowStats) -> u64;
const COUNTS: [(&str, Field); 8] = [
    ("roce.packets", |s| s.packets),
    ("roce.bytes", |s| s.bytes),
    ("roce.ecn.ce", |s| s.ecn[3]),
    ("roce.ops.cnp", |s| s.ops[OpClass::Cnp as usize]),
    ("roce.ops.nak", |s| s.ops[OpClass::Nak as usize]),
    ("roce.ops.write", |s| s.ops[OpClass::Write as usize]),
    ("roce.psn.missing", |s| s.seq.lost),
    ("roce.psn.retransmissions", |s| s.seq.retransmissions),
];

type QpKey = (String, String, u64, u64);

/// The tables whose rows an interval's own row counts, by their event names.
const TABLES: [&str; 5] = [
    "qp_intervals",
    "connection_sides",
    "latency_buckets",
    "pauses",
    "findings",
];

/// Traffic of the lab: three QPs that say something (one clean, one congested with CE marks
/// and CNPs, one lossy: a PSN gap, a NAK and go-back-N now and then) and `many` plain ones,
/// of which the second half stops after `stop_after` rounds (and is aged out meanwhile).
struct Traffic {
    qps: Vec<QpStream>,
    sent: BTreeMap<FlowKey, FlowStats>,
    /// The messages the generator completed, per flow.
    messages: BTreeMap<FlowKey, observer_common::MsgStats>,
    round: usize,
    stop_after: usize,
}

impl Traffic {
    fn new(many: usize, stop_after: usize) -> Self {
        let mut qps: Vec<QpStream> = (0..3 + many as u32)
            .map(|i| {
                let ip = Ip::v4(
                    Ipv4Addr::new(198, 18, 9 + (i / 200) as u8, 1 + (i % 200) as u8),
                    Ipv4Addr::new(198, 19, 9, 101),
                );
                QpStream::new(
                    wire::TRANSPORT_RC,
                    ip,
                    [host_mac(0x900 + i as u16), host_mac(0x965)],
                    [0x1600 + i, 0x1_0000 + i],
                    0x2000 * i,
                )
            })
            .collect();
        qps[1].ce_every = 2;
        Self {
            qps,
            sent: BTreeMap::new(),
            messages: BTreeMap::new(),
            round: 0,
            stop_after,
        }
    }

    fn one_round(&mut self, ns: &Netns) {
        let mut w = Workload::default();
        let plain = self.qps.len() - 3;
        for (i, qp) in self.qps.iter_mut().enumerate() {
            if i >= 3 + plain / 2 && self.round >= self.stop_after {
                continue;
            }
            match i {
                1 => {
                    qp.write(&mut w, 2048);
                    qp.cnp_if_marked(&mut w);
                }
                2 if self.round % 4 == 1 => {
                    qp.write(&mut w, 2048);
                    let first = qp.next_psn();
                    qp.lose_next(2);
                    qp.write(&mut w, 4096);
                    qp.nak(&mut w, first, synth::SYNDROME_NAK_SEQ);
                    qp.retransmit_from(&mut w, first);
                }
                _ => {
                    qp.write(&mut w, 1024);
                }
            }
            let last = qp.last_psn();
            qp.ack(&mut w, last);
        }
        for chunk in w.frames.chunks(4096) {
            send_frames(ns, chunk.to_vec());
        }
        for (k, s) in &w.truth.flows {
            self.sent.entry(*k).or_default().merge(s);
        }
        for (k, m) in &w.truth.messages {
            self.messages.entry(*k).or_default().merge(m);
        }
        self.round += 1;
    }

    /// Rounds for `how_long`, `gap` apart.
    fn run_for(&mut self, ns: &Netns, how_long: Duration, gap: Duration) {
        let until = Instant::now() + how_long;
        while Instant::now() < until {
            self.one_round(ns);
            std::thread::sleep(gap);
        }
    }

    fn packets(&self) -> u64 {
        self.sent.values().map(|s| s.packets).sum()
    }

    /// Per sender's address (one QP each), its messages: completed, their bytes, of unknown
    /// size.
    fn per_sender_messages(&self) -> BTreeMap<String, [u64; 3]> {
        let mut out: BTreeMap<String, [u64; 3]> = BTreeMap::new();
        for (k, m) in &self.messages {
            let ip = std::net::Ipv6Addr::from(k.src_ip)
                .to_ipv4_mapped()
                .unwrap()
                .to_string();
            let e = out.entry(ip).or_default();
            e[0] += m.messages();
            e[1] += m.bytes.iter().sum::<u64>();
            e[2] += m.unknown_size;
        }
        out.retain(|_, e| e.iter().any(|n| *n > 0));
        out
    }

    /// Per QP, the compared counts of what was sent.
    fn per_qp(&self) -> BTreeMap<QpKey, [u64; COUNTS.len()]> {
        self.sent
            .iter()
            .map(|(k, s)| {
                let ip = |a: [u8; 16]| {
                    std::net::Ipv6Addr::from(a)
                        .to_ipv4_mapped()
                        .unwrap()
                        .to_string()
                };
                (
                    (
                        ip(k.src_ip),
                        ip(k.dst_ip),
                        u64::from(k.udp_src_port),
                        u64::from(k.dest_qp),
                    ),
                    COUNTS.map(|(_, f)| f(s)),
                )
            })
            .collect()
    }
}

/// What the receiver holds, by table.
#[derive(Default)]
struct Got {
    /// Per QP, the compared counts summed over the intervals.
    qps: BTreeMap<QpKey, [u64; COUNTS.len()]>,
    /// Per connection side's address, its messages, their bytes and those of unknown size,
    /// summed over the intervals.
    messages: BTreeMap<String, [u64; 3]>,
    /// Per table, the rows' sequence numbers, sorted.
    seqs: BTreeMap<String, Vec<u64>>,
    /// Per interval number and table, the rows received.
    rows: BTreeMap<(u64, String), u64>,
    /// The intervals' own rows: the interval number and its rows per table.
    intervals: BTreeMap<u64, [u64; TABLES.len()]>,
    /// Their bounds.
    bounds: BTreeMap<u64, (u64, u64)>,
    /// Log records received (each once).
    records: u64,
    /// Copies of records received before.
    copies: u64,
}

/// The records received, each once: delivery is at least once (a receiver that took a request
/// and went away before answering gets it again), and `(table, seq)` tells a copy.
fn collect(received: &[Value]) -> Got {
    let mut got = Got::default();
    let mut seen = std::collections::HashSet::new();
    for r in received.iter().filter(|r| r["signal"] == "log") {
        let a = &r["attributes"];
        let event = r["event"].as_str().unwrap().trim_start_matches("roce.");
        if !seen.insert((event.to_string(), u(&a["roce.record.seq"]))) {
            got.copies += 1;
            continue;
        }
        got.records += 1;
        got.seqs
            .entry(event.to_string())
            .or_default()
            .push(u(&a["roce.record.seq"]));
        let interval = u(&a["roce.interval.seq"]);
        *got.rows.entry((interval, event.to_string())).or_default() += 1;
        match event {
            "qp_intervals" => {
                let key = (
                    a["source.address"].as_str().unwrap().to_string(),
                    a["destination.address"].as_str().unwrap().to_string(),
                    u(&a["source.port"]),
                    u(&a["rdma.qp.destination"]),
                );
                let e = got.qps.entry(key).or_default();
                for (i, (attr, _)) in COUNTS.iter().enumerate() {
                    e[i] += a.get(*attr).map_or(0, u);
                }
            }
            "connection_sides" => {
                let e = got
                    .messages
                    .entry(a["source.address"].as_str().unwrap().to_string())
                    .or_default();
                for (i, attr) in [
                    "roce.messages",
                    "roce.messages.bytes",
                    "roce.messages.unknown_size",
                ]
                .iter()
                .enumerate()
                {
                    e[i] += a.get(*attr).map_or(0, u);
                }
            }
            "intervals" => {
                // A count of 0 is left out.
                let counts = TABLES.map(|t| a.get(format!("roce.rows.{t}").as_str()).map_or(0, u));
                assert!(
                    got.intervals.insert(interval, counts).is_none(),
                    "interval {interval} twice"
                );
                got.bounds.insert(
                    interval,
                    (u(&a["roce.interval.start"]), u(&a["roce.interval.end"])),
                );
            }
            t if TABLES.contains(&t) => {}
            other => panic!("a {other} row from the sidecar"),
        }
    }
    for s in got.seqs.values_mut() {
        s.sort_unstable();
    }
    got.messages.retain(|_, e| e.iter().any(|n| *n > 0));
    got
}

impl Got {
    /// Each table's rows numbered 0, 1, 2... without a gap or a repeat.
    fn assert_whole(&self) {
        for (table, s) in &self.seqs {
            assert_eq!(
                *s,
                (0..s.len() as u64).collect::<Vec<_>>(),
                "{table}: rows without a gap"
            );
        }
        let n = self.intervals.len() as u64;
        assert_eq!(
            self.intervals.keys().copied().collect::<Vec<_>>(),
            (0..n).collect::<Vec<_>>(),
            "interval numbers without a gap"
        );
        // One after the other, none missing: an interval the builder was behind on is one
        // with the next (longer, not lost).
        for (a, b) in self.bounds.values().zip(self.bounds.values().skip(1)) {
            assert!(a.0 < a.1 && a.1 == b.0, "intervals {a:?} then {b:?}");
        }
        for (seq, counts) in &self.intervals {
            for (t, want) in TABLES.iter().zip(counts) {
                let got = self.rows.get(&(*seq, t.to_string())).copied().unwrap_or(0);
                assert_eq!(got, *want, "interval {seq}: its {t} rows");
            }
        }
    }

    /// Rows missing: per table, the numbers below the highest received that were not.
    fn missing(&self) -> u64 {
        self.seqs
            .values()
            .map(|s| s.last().map_or(0, |m| m + 1) - s.len() as u64)
            .sum()
    }
}

/// Waits until the receiver holds `packets` packets in QP rows.
fn wait_for_packets(receiver: &OtlpReceiver, packets: u64, sidecar: &LoggedChild) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = receiver.received();
        let got: u64 = r
            .iter()
            .filter(|r| r["event"] == "roce.qp_intervals")
            .map(|r| r["attributes"].get("roce.packets").map_or(0, u))
            .sum();
        if got >= packets {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "{got} of {packets} packets received:\n{}",
            sidecar.text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn outcome(s: &[Sample], o: &str) -> u64 {
    sample_sum(s, "roce_observer_export_records_total", &[("outcome", o)])
}

/// Scrapes until the sidecar has nothing pending (as of its last drain) and says it sent
/// `at_least` records.
fn settled(ns: &Netns, at_least: u64) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = scrape(ns);
        if sample_sum(&s, "roce_observer_export_pending_records", &[]) == 0
            && outcome(&s, "sent") >= at_least
        {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "pending {}, sent {}",
            sample_sum(&s, "roce_observer_export_pending_records", &[]),
            outcome(&s, "sent")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A lab with loopback up (the receiver listens there).
fn lab(name: &str) -> Lab {
    let lab = Lab::create(name).unwrap();
    let (status, _, err) = output(lab.ns.command("ip").args(["link", "set", "lo", "up"]));
    assert!(status.success(), "{err}");
    lab
}

fn receiver(lab: &Lab, scratch: &Scratch, name: &str, flags: &[&str]) -> OtlpReceiver {
    OtlpReceiver::start_with(
        lab.ns.command(integration_tests::venv_python()),
        scratch,
        name,
        flags,
    )
}

#[test]
fn every_intervals_records_reach_the_receiver_and_sum_to_what_was_sent() {
    if !require_root("every_intervals_records_reach_the_receiver_and_sum_to_what_was_sent") {
        return;
    }
    let scratch = Scratch::new("sidecar-otlp");
    let lab = lab("ro-sotlp");
    let receiver = receiver(&lab, &scratch, "sidecar", &[]);
    let endpoint = receiver.url("grpc");
    // A config file gives the OTLP settings as a fleet's configuration management would.
    let config = scratch.path("run.toml");
    std::fs::write(
        &config,
        format!(
            "[otlp]\nendpoint = \"{endpoint}\"\ncompression = \"gzip\"\nheaders = {{ x-tenant = \"lab\" }}\n"
        ),
    )
    .unwrap();
    let sidecar = start_sidecar(
        &lab.ns,
        &[
            "-i",
            Lab::RX,
            "--interval",
            "300ms",
            "--idle-timeout",
            "900ms",
            "--max-flows",
            "65536",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    // 2 x 6000 flows: more than the cache's 4096 slots per CPU.
    let mut traffic = Traffic::new(6000, 6);
    traffic.run_for(&lab.ns, Duration::from_secs(5), Duration::from_millis(100));
    let received = wait_for_packets(&receiver, traffic.packets(), &sidecar);
    let got = collect(&received);
    assert_eq!(
        got.qps,
        traffic.per_qp(),
        "per QP, the rows' sums are what was sent"
    );
    assert!(got.intervals.len() >= 3, "{:?}", got.intervals.len());
    for r in received.iter().filter(|r| r["signal"] == "log") {
        assert_eq!(r["headers"]["x-tenant"], "lab");
        // Unix times, within the interval (the last packet may come while the drain reads).
        let a = &r["attributes"];
        if r["event"] == "roce.qp_intervals" {
            let (start, end) = (u(&a["roce.interval.start"]), u(&a["roce.interval.end"]));
            let (first, last) = (u(&a["roce.first_seen"]), u(&a["roce.last_seen"]));
            assert!(
                start <= first && first <= last && last <= end + 1_000_000_000,
                "{start} {first} {last} {end}"
            );
        }
    }
    // Every message the generator completed, per side, as the kernel followed it. (An
    // interval's connection sides come after its QP rows, maybe in a later request: waited
    // for.)
    let want = traffic.per_sender_messages();
    let mut messages = got.messages.clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    while messages != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        messages = collect(&receiver.received()).messages;
    }
    assert_eq!(
        messages, want,
        "per connection side, the messages are what was sent"
    );
    assert!(messages.len() >= 6003, "{}", messages.len());
    // Connections, both sides of each, and their latency reached the receiver.
    let sides = got.seqs.get("connection_sides").map_or(0, Vec::len);
    assert!(sides >= 2 * 6003, "{sides} connection sides");
    assert!(got.seqs.contains_key("latency_buckets"));
    // The sidecar's own account: what it says it sent reached the receiver, nothing was dropped
    // or refused, and the aged-out flows went on the way.
    let samples = settled(&lab.ns, got.records);
    assert!(sample_sum(&samples, "roce_observer_flows_aged_total", &[]) >= 3000);
    assert_eq!(outcome(&samples, "rejected"), 0);
    assert_eq!(outcome(&samples, "dropped"), 0);
    assert_eq!(sample_sum(&samples, "roce_observer_export_up", &[]), 1);
    // SIGTERM: the last interval's records go out before the exit.
    let (status, log) = sidecar.stop();
    assert!(status.success(), "{status}\n{log}");
    assert!(log.contains("every record sent"), "{log}");
    let got = collect(&receiver.received());
    got.assert_whole();
    assert_eq!(got.qps, traffic.per_qp());
}

/// A sidecar of the NIC side alone (an offload host's), its host a copied tree whose QP's
/// process is rank 3 of a Slurm job: its records' resource names the job and the rank, and
/// nothing else of the process's environment leaves the host; a new reading of the table
/// (another rank) reaches the later records.
#[test]
fn the_records_name_the_job_and_rank_of_the_hosts_qps() {
    if !require_root("the_records_name_the_job_and_rank_of_the_hosts_qps") {
        return;
    }
    let scratch = Scratch::new("sidecar-otlp-rank");
    let lab = lab("ro-sorank");
    let receiver = receiver(&lab, &scratch, "rank", &[]);
    let tree = scratch.path("tree");
    let (status, _, err) = output(
        std::process::Command::new("cp")
            .arg("-r")
            .arg(integration_tests::workspace_root().join("tests/fixtures/hosts/good/before"))
            .arg(&tree),
    );
    assert!(status.success(), "{err}");
    // The fixture's one QP is RC, of pid 4242.
    let environ = tree.join("proc/4242/environ");
    std::fs::create_dir_all(environ.parent().unwrap()).unwrap();
    std::fs::write(
        &environ,
        "SLURM_JOB_ID=555\0SLURM_PROCID=3\0DB_PASSWORD=never-sent\0",
    )
    .unwrap();
    let config = scratch.file(
        "run.toml",
        &format!(
            "rdma_devices = [\"mlx5_0\"]\ninterval = \"300ms\"\nnic_root = \"{}\"\n[otlp]\nendpoint = \"{}\"\n",
            tree.display(),
            receiver.url("grpc")
        ),
    );
    let mut cmd = lab.ns.command(CLI);
    cmd.args(["run", "--config", config.to_str().unwrap()]);
    let sidecar = LoggedChild::spawn(cmd);
    sidecar.wait_log("the NIC side alone", Duration::from_secs(20));
    let resources = |want: &str| -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let got: Vec<Value> = receiver
                .received()
                .into_iter()
                .filter(|r| r["event"] == "roce.intervals")
                .map(|r| r["resource"].clone())
                .collect();
            if got.iter().any(|r| r["roce.job.rank"] == want) {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "no interval of rank {want}: {got:?}\n{}",
                sidecar.text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let got = resources("3");
    let r = got.iter().find(|r| r["roce.job.rank"] == "3").unwrap();
    assert_eq!(r["roce.job.id"], "slurm:555", "{r}");
    assert!(
        !receiver
            .received()
            .iter()
            .any(|r| r.to_string().contains("never-sent"))
    );
    // The QP table is read again every 30 s: another process (rank 4) then.
    std::fs::write(&environ, "SLURM_JOB_ID=556\0SLURM_PROCID=4\0").unwrap();
    let table = tree.join("rdma/qps.json");
    let qps = std::fs::read_to_string(&table)
        .unwrap()
        .replace("4242", "4243");
    std::fs::create_dir_all(tree.join("proc/4243")).unwrap();
    std::fs::rename(&environ, tree.join("proc/4243/environ")).unwrap();
    std::fs::write(&table, qps).unwrap();
    let got = resources("4");
    let r = got.iter().find(|r| r["roce.job.rank"] == "4").unwrap();
    assert_eq!(r["roce.job.id"], "slurm:556", "{r}");
    let (status, log) = sidecar.stop();
    assert!(status.success(), "{status}\n{log}");
}

/// Two free TCP ports on the namespace's loopback (for a receiver started again on them).
fn free_ports(ns: &Netns) -> (u16, u16) {
    ns.run_in(|| {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        (
            a.local_addr().unwrap().port(),
            b.local_addr().unwrap().port(),
        )
    })
    .unwrap()
}

#[test]
fn a_receiver_away_loses_nothing_within_the_buffer_and_exactly_what_was_dropped_beyond_it() {
    if !require_root(
        "a_receiver_away_loses_nothing_within_the_buffer_and_exactly_what_was_dropped_beyond_it",
    ) {
        return;
    }
    let scratch = Scratch::new("sidecar-otlp-away");
    let lab = lab("ro-sotlpa");
    let (grpc, http) = free_ports(&lab.ns);
    let ports = [
        "--grpc-port".to_string(),
        grpc.to_string(),
        "--http-port".to_string(),
        http.to_string(),
    ];
    let ports: Vec<&str> = ports.iter().map(String::as_str).collect();
    // (buffer MiB, plain QPs): a buffer that holds the outage's records, and one that does not.
    for (buffer, many, protocol) in [("64", 300, "grpc"), ("1", 2000, "http-protobuf")] {
        let name = format!("away-{buffer}");
        let first = receiver(&lab, &scratch, &name, &ports);
        let endpoint = first.url(if protocol == "grpc" { "grpc" } else { "http" });
        let sidecar = start_sidecar(
            &lab.ns,
            &[
                "-i",
                Lab::RX,
                "--interval",
                "300ms",
                "--max-flows",
                "65536",
                "--otlp-endpoint",
                &endpoint,
                "--otlp-protocol",
                protocol,
                "--otlp-buffer-mib",
                buffer,
            ],
        );
        let mut traffic = Traffic::new(many, usize::MAX);
        traffic.run_for(&lab.ns, Duration::from_secs(2), Duration::from_millis(100));
        wait_for_packets(&first, traffic.packets(), &sidecar);
        // Away for a while, traffic going on.
        drop(first);
        traffic.run_for(&lab.ns, Duration::from_secs(3), Duration::from_millis(100));
        let down = scrape(&lab.ns);
        assert_eq!(sample_sum(&down, "roce_observer_export_up", &[]), 0);
        assert!(sample_sum(&down, "roce_observer_export_retries_total", &[]) > 0);
        // Back on the same ports (the same file: what it received before stays).
        let back = receiver(&lab, &scratch, &name, &ports);
        traffic.run_for(&lab.ns, Duration::from_secs(2), Duration::from_millis(100));
        let packets = traffic.packets();
        let (status, log) = sidecar.stop();
        assert!(status.success(), "{status}\n{log}");
        let got = collect(&back.received());
        // Rows of tables every interval of this traffic has (its congested and lossy QPs' findings
        // among them): every table's last rows came after the outage, so a row lost is a gap
        // below the highest number.
        for t in got.seqs.keys() {
            assert!(
                [
                    "qp_intervals",
                    "connection_sides",
                    "latency_buckets",
                    "findings",
                    "intervals"
                ]
                .contains(&t.as_str()),
                "{t} rows"
            );
        }
        if buffer == "64" {
            assert!(log.contains("every record sent"), "{log}");
            got.assert_whole();
            assert_eq!(got.qps, traffic.per_qp(), "{protocol}: nothing lost");
            let received: u64 = got.qps.values().map(|c| c[0]).sum();
            assert_eq!(received, packets);
        } else {
            // The sidecar's last words say what it dropped; the receiver lacks exactly those.
            let field = |name: &str| -> u64 {
                let at = log
                    .rfind(&format!("{name}="))
                    .unwrap_or_else(|| panic!("no {name}= in:\n{log}"));
                log[at + name.len() + 1..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
                    .parse()
                    .unwrap()
            };
            let (sent, dropped) = (field("sent"), field("dropped"));
            assert!(dropped > 0, "the outage overflowed the buffer:\n{log}");
            assert_eq!((field("rejected"), field("pending")), (0, 0), "{log}");
            // Every record received (once: copies aside), the sent ones, and the others
            // dropped: those the receiver lacks (a lost row between two received ones of its
            // table is a gap; a table's last rows lost show only in the count).
            // A request the first receiver took and never answered came again: a copy, not
            // another record sent.
            assert_eq!(got.records, sent, "{log}");
            assert_eq!(field("records") - got.records, dropped, "{log}");
            assert!(got.missing() <= dropped && got.missing() > 0);
        }
    }
}

#[test]
fn a_slow_or_failing_receiver_holds_up_neither_the_metrics_nor_the_drains() {
    if !require_root("a_slow_or_failing_receiver_holds_up_neither_the_metrics_nor_the_drains") {
        return;
    }
    let scratch = Scratch::new("sidecar-otlp-slow");
    let lab = lab("ro-sotlps");
    for (flags, protocol) in [
        (&["--fail-always"][..], "grpc"),
        (&["--fail-always"][..], "http-protobuf"),
        (&["--delay", "30"][..], "grpc"),
        (&["--delay", "30"][..], "http-protobuf"),
    ] {
        let name = format!("{protocol}{}", flags.join(""));
        let receiver = receiver(&lab, &scratch, &name, flags);
        let endpoint = receiver.url(if protocol == "grpc" { "grpc" } else { "http" });
        let sidecar = start_sidecar(
            &lab.ns,
            &[
                "-i",
                Lab::RX,
                "--interval",
                "200ms",
                "--otlp-endpoint",
                &endpoint,
                "--otlp-protocol",
                protocol,
                "--otlp-timeout",
                "5s",
            ],
        );
        let drains = |s: &[Sample]| sample_sum(s, "roce_observer_drains_total", &[]);
        let before = drains(&scrape(&lab.ns));
        let started = Instant::now();
        let mut traffic = Traffic::new(500, usize::MAX);
        while started.elapsed() < Duration::from_secs(4) {
            traffic.one_round(&lab.ns);
            // Every scrape answers at once, whatever the receiver does.
            scrape_within(&lab.ns, Duration::from_secs(1)).unwrap_or_else(|| {
                panic!(
                    "{name}: /metrics did not answer within 1s:\n{}",
                    sidecar.text()
                )
            });
        }
        // The drains went on at their interval (a few missed to scheduling at most), and the
        // counts are exact.
        let deadline = Instant::now() + Duration::from_secs(5);
        let s = loop {
            let s = scrape(&lab.ns);
            if sample_sum(&s, "roce_packets_total", &[]) >= traffic.packets() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: packets never all counted"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let elapsed = started.elapsed().as_millis() as u64;
        // (A drain waiting on the receiver would make one drain per request timeout: 5 s.)
        assert!(
            drains(&s) - before >= elapsed / 200 / 2,
            "{name}: {} drains in {elapsed} ms",
            drains(&s) - before
        );
        assert_eq!(sample_sum(&s, "roce_packets_total", &[]), traffic.packets());
        assert_eq!(outcome(&s, "sent"), 0, "{name}");
        assert!(sample_sum(&s, "roce_observer_export_pending_records", &[]) > 0);
        if flags[0] == "--fail-always" {
            assert_eq!(sample_sum(&s, "roce_observer_export_up", &[]), 0);
            assert!(sample_sum(&s, "roce_observer_export_retries_total", &[]) > 0);
        }
        // SIGTERM: the exit waits for the records no longer than the request timeout, and says
        // how many were not delivered.
        let stopping = Instant::now();
        let (status, log) = sidecar.stop();
        assert!(status.success(), "{status}\n{log}");
        assert!(
            stopping.elapsed() < Duration::from_secs(10),
            "{:?}",
            stopping.elapsed()
        );
        assert!(log.contains("records not delivered"), "{log}");
        drop(receiver);
    }
}
