//! `roce-observer run --otlp-endpoint`: every interval's fleet records from the sidecar, live on a
//! lab veth, to the test receiver on the official protobufs (in the lab's namespace). Per QP,
//! the rows of all intervals sum to what the generator sent; intervals and each table's rows
//! are numbered without gaps, each interval's own row counts its QP rows; the sidecar's export
//! metrics say how many were sent.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read, Write},
    net::Ipv4Addr,
    process::{Child, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use integration_tests::{
    OtlpReceiver, Scratch, output, parse_exposition, require_root, sample_sum,
};
use observer_common::{FlowKey, FlowStats, OpClass, wire};
use roce_observer::{
    lab::{Lab, Netns},
    source::synth::{self, Ip, QpStream, Workload, host_mac},
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");
const PORT: u16 = 9477;

/// The sidecar in the lab's namespace, its stderr kept; killed on drop.
struct Sidecar {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Sidecar {
    fn start(ns: &Netns, args: &[&str]) -> Self {
        let mut child = ns
            .command(CLI)
            .arg("run")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the sidecar");
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let s = Self { child, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !s.text().contains("attached; serving") {
            assert!(Instant::now() < deadline, "not attached:\n{}", s.text());
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    fn text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// /metrics in `ns`, parsed.
fn scrape(ns: &Netns) -> Vec<integration_tests::Sample> {
    let body = ns
        .run_in(|| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", PORT))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok::<_, std::io::Error>(out)
        })
        .unwrap()
        .expect("GET /metrics");
    let (_, body) = body.split_once("\r\n\r\n").expect("an HTTP answer");
    let samples = parse_exposition(body, false);
    integration_tests::assert_in_registry(&samples);
    samples
}

fn send(ns: &Netns, w: &Workload) {
    let frames = w.frames.clone();
    let n = ns
        .run_in(move || {
            roce_observer::lab::pin_current_thread().expect("pin");
            synth::send(Lab::TX, &frames)
        })
        .unwrap()
        .expect("send");
    assert_eq!(n, w.frames.len());
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("a number: {v}"))
}

/// The counts compared per QP: the record's attribute and the generator's field.
type Field = fn(&FlowStats) -> u64;
const COUNTS: [(&str, Field); 7] = [
    ("roce.packets", |s| s.packets),
    ("roce.bytes", |s| s.bytes),
    ("roce.ecn.ce", |s| s.ecn[3]),
    ("roce.ops.cnp", |s| s.ops[OpClass::Cnp as usize]),
    ("roce.ops.nak", |s| s.ops[OpClass::Nak as usize]),
    ("roce.psn.missing", |s| s.seq.lost),
    ("roce.psn.retransmissions", |s| s.seq.retransmissions),
];

#[test]
fn every_intervals_records_reach_the_receiver_and_sum_to_what_was_sent() {
    if !require_root("every_intervals_records_reach_the_receiver_and_sum_to_what_was_sent") {
        return;
    }
    let scratch = Scratch::new("sidecar-otlp");
    let lab = Lab::create("ro-sotlp").unwrap();
    let (status, _, err) = output(lab.ns.command("ip").args(["link", "set", "lo", "up"]));
    assert!(status.success(), "{err}");
    let receiver = OtlpReceiver::start_with(
        lab.ns.command(OtlpReceiver::python()),
        &scratch,
        "sidecar",
        &[],
    );
    let endpoint = receiver.url("grpc");
    let sidecar = Sidecar::start(
        &lab.ns,
        &[
            "-i",
            Lab::RX,
            "--interval",
            "300ms",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-header",
            "x-tenant=lab",
        ],
    );

    // Three QPs: one clean, one congested (CE marks and CNPs), one lossy (a PSN gap, a NAK and
    // go-back-N now and then).
    let mut qps: Vec<QpStream> = (0..3u32)
        .map(|i| {
            let ip = Ip::v4(
                Ipv4Addr::new(198, 18, 9, 1 + i as u8),
                Ipv4Addr::new(198, 18, 9, 101),
            );
            QpStream::new(
                wire::TRANSPORT_RC,
                ip,
                [host_mac(0x900 + i as u16), host_mac(0x965)],
                [0x1600 + i, 0x1700 + i],
                0x2000 * i,
            )
        })
        .collect();
    qps[1].ce_every = 2;
    let mut sent: BTreeMap<FlowKey, FlowStats> = BTreeMap::new();
    let until = Instant::now() + Duration::from_secs(3);
    let mut round = 0;
    while Instant::now() < until {
        let mut w = Workload::default();
        for (i, qp) in qps.iter_mut().enumerate() {
            match i {
                1 => {
                    qp.write(&mut w, 2048);
                    qp.cnp_if_marked(&mut w);
                }
                2 if round % 4 == 1 => {
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
        send(&lab.ns, &w);
        for (k, s) in &w.truth.flows {
            sent.entry(*k).or_default().merge(s);
        }
        round += 1;
        std::thread::sleep(Duration::from_millis(30));
    }

    // Wait until the receiver holds every packet sent (the last intervals drain and send).
    let want_packets: u64 = sent.values().map(|s| s.packets).sum();
    let deadline = Instant::now() + Duration::from_secs(20);
    let received = loop {
        let r = receiver.received();
        let packets: u64 = r
            .iter()
            .filter(|r| r["event"] == "roce.qp_intervals")
            .map(|r| u(&r["attributes"]["roce.packets"]))
            .sum();
        if packets >= want_packets {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "{packets} of {want_packets} packets received:\n{}",
            sidecar.text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    // Per QP, the intervals' rows sum to what was sent.
    let mut got: BTreeMap<(String, String, u64, u64), [u64; 7]> = BTreeMap::new();
    let mut by_interval: BTreeMap<u64, u64> = BTreeMap::new();
    let mut seqs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut intervals: Vec<(u64, u64)> = Vec::new();
    for r in received.iter().filter(|r| r["signal"] == "log") {
        let a = &r["attributes"];
        assert_eq!(r["headers"]["x-tenant"], "lab");
        let event = r["event"].as_str().unwrap().to_string();
        seqs.entry(event.clone())
            .or_default()
            .push(u(&a["roce.record.seq"]));
        match event.as_str() {
            "roce.qp_intervals" => {
                let key = (
                    a["source.address"].as_str().unwrap().to_string(),
                    a["destination.address"].as_str().unwrap().to_string(),
                    u(&a["source.port"]),
                    u(&a["rdma.qp.destination"]),
                );
                let e = got.entry(key).or_default();
                for (i, (attr, _)) in COUNTS.iter().enumerate() {
                    e[i] += u(&a[*attr]);
                }
                *by_interval.entry(u(&a["roce.interval.seq"])).or_default() += 1;
            }
            "roce.intervals" => {
                intervals.push((u(&a["roce.interval.seq"]), u(&a["roce.rows.qp_intervals"])));
            }
            other => panic!("a {other} row from the sidecar"),
        }
    }
    let want: BTreeMap<(String, String, u64, u64), [u64; 7]> = sent
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
        .collect();
    assert_eq!(got, want, "per QP, the rows' sums are what was sent");
    // Every interval once, in order, each with its QP rows counted.
    intervals.sort_unstable();
    assert!(intervals.len() >= 5, "{intervals:?}");
    for (i, (seq, rows)) in intervals.iter().enumerate() {
        assert_eq!(*seq, i as u64, "interval numbers without a gap");
        assert_eq!(
            *rows,
            by_interval.get(seq).copied().unwrap_or(0),
            "interval {seq}"
        );
    }
    for (event, mut s) in seqs {
        s.sort_unstable();
        assert_eq!(
            s,
            (0..s.len() as u64).collect::<Vec<_>>(),
            "{event}: rows without a gap"
        );
    }
    // The sidecar's own account (published at each drain, so it catches up with the
    // receiver): what it says it sent reached the receiver, nothing was dropped or refused.
    let rows_received = received.iter().filter(|r| r["signal"] == "log").count() as u64;
    let sent = |s: &[integration_tests::Sample]| {
        sample_sum(
            s,
            "roce_observer_export_records_total",
            &[("outcome", "sent")],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let samples = loop {
        let samples = scrape(&lab.ns);
        if sent(&samples) >= rows_received {
            break samples;
        }
        assert!(
            Instant::now() < deadline,
            "{} sent, {rows_received} received",
            sent(&samples)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let logged = || {
        receiver
            .received()
            .iter()
            .filter(|r| r["signal"] == "log")
            .count() as u64
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while logged() < sent(&samples) {
        assert!(Instant::now() < deadline, "the sent rows never all arrived");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        sample_sum(
            &samples,
            "roce_observer_export_records_total",
            &[("outcome", "rejected")]
        ),
        0
    );
    assert_eq!(
        sample_sum(
            &samples,
            "roce_observer_export_records_total",
            &[("outcome", "dropped")]
        ),
        0
    );
    drop(sidecar);
}
