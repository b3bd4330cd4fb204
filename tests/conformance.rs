//! Conformance with the reference dissector: the same capture decoded by tshark and by
//! `roce-observer replay FILE --json` gives, per flow (source IP, destination IP, UDP source
//! port, BTH destination QP), exactly the same packets, bytes, ECN counts, operation counts
//! and DSCP set, and the same set of flows.
//!
//! PAUSE / PFC frames are compared too: per source MAC, PFC frames, and per priority (and for
//! 802.3x PAUSE) frames, XON frames and summed quanta, from tshark's `macc` fields.
//!
//! The tshark side is independent of the observer: it maps BTH opcodes and AETH syndromes to
//! operation classes from the wire specification (docs/wire.md), not through
//! `observer_common`.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    net::IpAddr,
    path::{Path, PathBuf},
    process::Command,
};

use integration_tests::{Scratch, output};
use roce_observer::model::{Ecn, Flow, Ops, Report};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// The synthetic scenarios compared: the user scenarios (complete frames only) and "demo".
fn scenarios() -> impl Iterator<Item = &'static str> {
    roce_observer::source::synth::USER_SCENARIOS
        .into_iter()
        .chain(["demo"])
}
const ROCE_PORT: u16 = 4791;

/// Payload heuristics that misreport perftest/NCCL payloads as malformed.
const HEURISTICS: &[&str] = &[
    "rpcrdma_infiniband",
    "nvme_rdma",
    "iser_infiniband",
    "smb_direct_infiniband",
    "smcr_infiniband",
    "lnet_ib",
    "sdp_infiniband",
    "fc_infiniband",
    "eth_over_ib",
];

/// The tshark fields extracted, in column order (tab separated, last occurrence: the
/// innermost header of a tunnel).
const FIELDS: &[&str] = &[
    "frame.number",
    "frame.protocols",
    "ip.src",
    "ip.dst",
    "ipv6.src",
    "ipv6.dst",
    "ip.len",
    "ipv6.plen",
    "ip.dsfield.dscp",
    "ip.dsfield.ecn",
    "ipv6.tclass.dscp",
    "ipv6.tclass.ecn",
    "udp.srcport",
    "udp.dstport",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.aeth.syndrome",
    "infiniband.bth.padcnt",
];

// ---------------------------------------------------------------------------------------------
// Environment: tshark, the shared captures, temporary files.
// ---------------------------------------------------------------------------------------------

/// Skips loudly outside CI, fails under CI.
fn skip(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test}: would be SKIPPED ({why}) but CI is set: failing");
    }
    eprintln!("\n*** SKIPPED {test}: {why} ***\n");
}

fn have_tshark(test: &str) -> bool {
    let ok = Command::new("tshark")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(test, "tshark (the reference dissector) is not installed");
    }
    ok
}

/// `shared/captures/SUB` beside the workspace, if present.
fn shared_captures(test: &str, sub: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/captures")
        .join(sub);
    match dir.canonicalize() {
        Ok(d) if d.is_dir() => Some(d),
        _ => {
            skip(test, &format!("{} is missing", dir.display()));
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The reference side: tshark rows and per-flow accumulation.
// ---------------------------------------------------------------------------------------------

/// Flow key of the report: (src ip, dst ip, UDP source port, BTH dest QP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct TsharkFlowKey {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    qp: u32,
}

impl TsharkFlowKey {
    fn of(f: &Flow) -> Self {
        Self {
            src: f.src_ip,
            dst: f.dst_ip,
            sport: f.udp_src_port,
            qp: f.dest_qp,
        }
    }
}

impl fmt::Display for TsharkFlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} -> {} sport {} qp 0x{:06x}",
            self.src, self.dst, self.sport, self.qp
        )
    }
}

/// One RoCEv2 packet as tshark decodes it.
#[derive(Debug)]
struct Row {
    frame: u64,
    flow: TsharkFlowKey,
    /// IPv4 total length, or 40 + IPv6 payload length.
    ip_bytes: u64,
    dscp: u8,
    ecn: u8,
    opcode: u8,
    syndrome: Option<u8>,
    /// BTH pad count (bytes of padding before the ICRC).
    pad: u8,
}

/// What tshark says about one flow.
#[derive(Debug, Default)]
struct TsharkFlow {
    first_frame: u64,
    packets: u64,
    bytes: u64,
    ecn: Ecn,
    ops: Ops,
    dscp: BTreeSet<u8>,
}

impl TsharkFlow {
    fn add(&mut self, r: &Row) {
        if self.packets == 0 {
            self.first_frame = r.frame;
        }
        self.packets += 1;
        self.bytes += r.ip_bytes;
        // RFC 3168: 00 Not-ECT, 01 ECT(1), 10 ECT(0), 11 CE.
        match r.ecn {
            0 => self.ecn.not_ect += 1,
            1 => self.ecn.ect1 += 1,
            2 => self.ecn.ect0 += 1,
            _ => self.ecn.ce += 1,
        }
        *op_slot(&mut self.ops, classify(r.opcode, r.syndrome)) += 1;
        self.dscp.insert(r.dscp);
    }
}

/// Operation classes of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Send,
    Write,
    ReadRequest,
    ReadResponse,
    Ack,
    Nak,
    RnrNak,
    Atomic,
    AtomicAck,
    Cnp,
    Other,
}

/// The class of a BTH opcode (and AETH syndrome, for ACKNOWLEDGE), from the specification:
/// top 3 bits transport, low 5 bits operation.
fn classify(opcode: u8, syndrome: Option<u8>) -> Op {
    if opcode == 0x81 {
        return Op::Cnp;
    }
    let op = opcode & 0x1F;
    let defined = match opcode & 0xE0 {
        // RC and XRC: every operation of the table.
        0x00 | 0xA0 => op <= 0x14 || op == 0x16 || op == 0x17,
        // UC: SEND and RDMA WRITE only.
        0x20 => op <= 0x0B,
        // RD: everything up to FETCH_ADD, no SEND with invalidate.
        0x40 => op <= 0x14,
        // UD: SEND only, SEND only with immediate.
        0x60 => op == 0x04 || op == 0x05,
        // 0x80 (CNP and vendor), 0xC0, 0xE0.
        _ => false,
    };
    if !defined {
        return Op::Other;
    }
    match op {
        0x00..=0x05 | 0x16 | 0x17 => Op::Send,
        0x06..=0x0B => Op::Write,
        0x0C => Op::ReadRequest,
        0x0D..=0x10 => Op::ReadResponse,
        0x11 => match syndrome.map(|s| s >> 5) {
            None | Some(0b000) => Op::Ack,
            Some(0b001) => Op::RnrNak,
            Some(0b011) => Op::Nak,
            Some(_) => Op::Other,
        },
        0x12 => Op::AtomicAck,
        0x13 | 0x14 => Op::Atomic,
        _ => Op::Other,
    }
}

fn op_slot(o: &mut Ops, op: Op) -> &mut u64 {
    match op {
        Op::Send => &mut o.send,
        Op::Write => &mut o.write,
        Op::ReadRequest => &mut o.read_request,
        Op::ReadResponse => &mut o.read_response,
        Op::Ack => &mut o.ack,
        Op::Nak => &mut o.nak,
        Op::RnrNak => &mut o.rnr_nak,
        Op::Atomic => &mut o.atomic,
        Op::AtomicAck => &mut o.atomic_ack,
        Op::Cnp => &mut o.cnp,
        Op::Other => &mut o.other,
    }
}

/// Runs tshark on FILE with ARGS; its stdout.
fn tshark(file: &Path, args: &[&str]) -> String {
    let (status, out, err) = output(
        Command::new("tshark")
            .arg("-n")
            .arg("-r")
            .arg(file)
            .args(args),
    );
    assert!(
        status.success(),
        "tshark -r {}: {status}: {err}",
        file.display()
    );
    out
}

/// UDP source ports of RoCEv2 packets that tshark gives to another dissector (it tries the
/// lower port first): each needs a decode-as.
fn decode_as_ports(file: &Path) -> Vec<u16> {
    let out = tshark(
        file,
        &[
            "-Y",
            "udp.dstport==4791 && !infiniband",
            "-T",
            "fields",
            "-E",
            "occurrence=l",
            "-e",
            "udp.srcport",
        ],
    );
    let ports: BTreeSet<u16> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| num(l.trim(), "udp.srcport", file))
        .collect();
    ports.into_iter().collect()
}

/// A decimal or 0x-prefixed hexadecimal tshark number.
fn num<T: TryFrom<u64>>(s: &str, field: &str, file: &Path) -> T {
    let v = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    v.ok()
        .and_then(|v| T::try_from(v).ok())
        .unwrap_or_else(|| panic!("{}: tshark field {field}: bad value {s:?}", file.display()))
}

/// Every RoCEv2 packet of FILE (UDP destination port 4791 with a BTH), as tshark decodes it,
/// and the decode-as ports used.
fn tshark_rows(file: &Path) -> (Vec<Row>, Vec<u16>) {
    let (out, ports) = tshark_roce_fields(file, FIELDS);
    let rows = out
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| parse_row(l, file))
        .collect();
    (rows, ports)
}

/// `fields` of every RoCEv2 packet of FILE (UDP destination port 4791 with a BTH) as tshark
/// decodes it: tab separated, the last occurrence (the innermost header of a tunnel), the
/// decode-as ports set and the other dissectors' heuristics off. Its output and the ports.
fn tshark_roce_fields(file: &Path, fields: &[&str]) -> (String, Vec<u16>) {
    let ports = decode_as_ports(file);
    let mut args: Vec<String> = Vec::new();
    for p in &ports {
        args.extend(["-d".into(), format!("udp.port=={p},infiniband")]);
    }
    for h in HEURISTICS {
        args.extend(["--disable-heuristic".into(), h.to_string()]);
    }
    args.extend(
        [
            "-Y",
            "infiniband.bth && udp.dstport==4791",
            "-T",
            "fields",
            "-E",
            "separator=/t",
            "-E",
            "occurrence=l",
        ]
        .map(String::from),
    );
    for f in fields {
        args.extend(["-e".into(), f.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (tshark(file, &args), ports)
}

fn parse_row(line: &str, file: &Path) -> Row {
    let cols: Vec<&str> = line.split('\t').collect();
    assert_eq!(
        cols.len(),
        FIELDS.len(),
        "{}: tshark row with {} columns, want {}: {line:?}",
        file.display(),
        cols.len(),
        FIELDS.len()
    );
    let col = |name: &str| -> &str { cols[FIELDS.iter().position(|f| *f == name).unwrap()] };
    let frame: u64 = num(col("frame.number"), "frame.number", file);
    let at = |what: &str| format!("{} frame {frame}: {what}", file.display());
    let protocols = col("frame.protocols");
    assert!(
        !protocols.contains("_ws.malformed") && !protocols.contains("_ws.short"),
        "{}: tshark marks the frame malformed or cut ({protocols}): the reference decode is not usable",
        at("")
    );
    // The innermost IP header: the last of ip/ipv6 in the protocol stack.
    let v6 = protocols
        .split(':')
        .rev()
        .find(|p| *p == "ip" || *p == "ipv6")
        .unwrap_or_else(|| panic!("{}", at(&format!("no IP layer in {protocols}"))))
        == "ipv6";
    let (src, dst, ip_bytes, dscp, ecn) = if v6 {
        let plen: u64 = num(col("ipv6.plen"), "ipv6.plen", file);
        (
            col("ipv6.src"),
            col("ipv6.dst"),
            40 + plen,
            num(col("ipv6.tclass.dscp"), "ipv6.tclass.dscp", file),
            num(col("ipv6.tclass.ecn"), "ipv6.tclass.ecn", file),
        )
    } else {
        (
            col("ip.src"),
            col("ip.dst"),
            num(col("ip.len"), "ip.len", file),
            num(col("ip.dsfield.dscp"), "ip.dsfield.dscp", file),
            num(col("ip.dsfield.ecn"), "ip.dsfield.ecn", file),
        )
    };
    let ip = |s: &str| -> IpAddr {
        s.parse()
            .unwrap_or_else(|e| panic!("{}", at(&format!("address {s:?}: {e}"))))
    };
    let dport: u16 = num(col("udp.dstport"), "udp.dstport", file);
    assert_eq!(
        dport,
        ROCE_PORT,
        "{}",
        at("display filter let a non-RoCE port through")
    );
    let syndrome = match col("infiniband.aeth.syndrome") {
        "" => None,
        s => Some(num(s, "infiniband.aeth.syndrome", file)),
    };
    Row {
        frame,
        flow: TsharkFlowKey {
            src: ip(src),
            dst: ip(dst),
            sport: num(col("udp.srcport"), "udp.srcport", file),
            qp: num(col("infiniband.bth.destqp"), "infiniband.bth.destqp", file),
        },
        ip_bytes,
        dscp,
        ecn,
        opcode: num(col("infiniband.bth.opcode"), "infiniband.bth.opcode", file),
        syndrome,
        pad: num(col("infiniband.bth.padcnt"), "infiniband.bth.padcnt", file),
    }
}

fn tshark_flows(rows: &[Row]) -> BTreeMap<TsharkFlowKey, TsharkFlow> {
    let mut flows: BTreeMap<TsharkFlowKey, TsharkFlow> = BTreeMap::new();
    for r in rows {
        flows.entry(r.flow).or_default().add(r);
    }
    flows
}

// ---------------------------------------------------------------------------------------------
// The side under test and the comparison.
// ---------------------------------------------------------------------------------------------

/// `roce-observer replay FILE --json`: the report, its schema and source checked.
fn replay(file: &Path) -> Report {
    let (status, out, err) = output(Command::new(CLI).arg("replay").arg(file).arg("--json"));
    assert!(
        status.success(),
        "roce-observer replay {} --json: {status}: {err}",
        file.display()
    );
    let json: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("replay {}: not JSON ({e}): {out}", file.display()));
    assert_eq!(
        json["schema"],
        "roce-observer/report/v1",
        "{}",
        file.display()
    );
    assert_eq!(json["source"]["kind"], "pcap", "{}", file.display());
    assert_eq!(
        json["source"]["files"],
        serde_json::json!([file.to_str().unwrap()]),
        "{}: source.files",
        file.display()
    );
    serde_json::from_value(json)
        .unwrap_or_else(|e| panic!("replay {}: not a report v1 ({e}): {out}", file.display()))
}

fn ecn_fields(e: &Ecn) -> [(&'static str, u64); 4] {
    [
        ("ecn.not_ect", e.not_ect),
        ("ecn.ect0", e.ect0),
        ("ecn.ect1", e.ect1),
        ("ecn.ce", e.ce),
    ]
}

fn ops_fields(o: &Ops) -> [(&'static str, u64); 11] {
    [
        ("ops.send", o.send),
        ("ops.write", o.write),
        ("ops.read_request", o.read_request),
        ("ops.read_response", o.read_response),
        ("ops.ack", o.ack),
        ("ops.nak", o.nak),
        ("ops.rnr_nak", o.rnr_nak),
        ("ops.atomic", o.atomic),
        ("ops.atomic_ack", o.atomic_ack),
        ("ops.cnp", o.cnp),
        ("ops.other", o.other),
    ]
}

/// Every difference between tshark's flows and the report's, one line each.
fn differences(want: &BTreeMap<TsharkFlowKey, TsharkFlow>, report: &Report) -> Vec<String> {
    let mut diffs = Vec::new();
    let mut got: BTreeMap<TsharkFlowKey, &Flow> = BTreeMap::new();
    for f in &report.flows {
        if got.insert(TsharkFlowKey::of(f), f).is_some() {
            diffs.push(format!(
                "flow {}: twice in the report",
                TsharkFlowKey::of(f)
            ));
        }
    }
    for (id, t) in want {
        let Some(o) = got.get(id) else {
            diffs.push(format!(
                "flow {id}: tshark has it ({} packets, first frame {}), the report does not",
                t.packets, t.first_frame
            ));
            continue;
        };
        let mut fields = vec![
            ("packets", t.packets, o.packets),
            ("bytes", t.bytes, o.bytes),
        ];
        for ((name, tv), (_, ov)) in ecn_fields(&t.ecn).into_iter().zip(ecn_fields(&o.ecn)) {
            fields.push((name, tv, ov));
        }
        for ((name, tv), (_, ov)) in ops_fields(&t.ops).into_iter().zip(ops_fields(&o.ops)) {
            fields.push((name, tv, ov));
        }
        for (name, tv, ov) in fields {
            if tv != ov {
                diffs.push(format!(
                    "flow {id} (first frame {}): {name}: tshark {tv}, replay {ov}",
                    t.first_frame
                ));
            }
        }
        let tdscp: Vec<u8> = t.dscp.iter().copied().collect();
        if tdscp != o.dscp {
            diffs.push(format!(
                "flow {id} (first frame {}): dscp: tshark {tdscp:?}, replay {:?}",
                t.first_frame, o.dscp
            ));
        }
    }
    for (id, o) in &got {
        if !want.contains_key(id) {
            diffs.push(format!(
                "flow {id}: the report has it ({} packets), tshark does not",
                o.packets
            ));
        }
    }
    diffs
}

/// One capture decoded both ways.
struct Comparison {
    report: Report,
    /// The decode-as ports tshark needed.
    ports: Vec<u16>,
    /// Every difference, one line each.
    diffs: Vec<String>,
}

/// Per source MAC: PFC frames, then (frames, XON, quanta) per priority 0..7 and 802.3x PAUSE (8).
type PauseCountsBySource = BTreeMap<String, (u64, [(u64, u64, u64); 9])>;

/// The PAUSE / PFC frames as tshark decodes them (innermost Ethernet source of mirror copies).
fn tshark_pauses(file: &Path) -> PauseCountsBySource {
    let mut args = vec![
        "-Y",
        "macc.opcode == 0x0001 || macc.opcode == 0x0101",
        "-T",
        "fields",
        "-E",
        "occurrence=l",
        "-E",
        "separator=/t",
        "-e",
        "eth.src",
        "-e",
        "macc.opcode",
        "-e",
        "macc.cbfc.enbv",
        "-e",
        "macc.pause_time",
    ];
    const TIMES: [&str; 8] = [
        "macc.cbfc.pause_time.c0",
        "macc.cbfc.pause_time.c1",
        "macc.cbfc.pause_time.c2",
        "macc.cbfc.pause_time.c3",
        "macc.cbfc.pause_time.c4",
        "macc.cbfc.pause_time.c5",
        "macc.cbfc.pause_time.c6",
        "macc.cbfc.pause_time.c7",
    ];
    for t in TIMES {
        args.extend(["-e", t]);
    }
    let mut out = PauseCountsBySource::new();
    for line in tshark(file, &args).lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 12, "{}: tshark macc row {line:?}", file.display());
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let entry = out.entry(f[0].to_string()).or_default();
        let mut count = |class: usize, q: u64| {
            let c = &mut entry.1[class];
            c.0 += 1;
            c.1 += u64::from(q == 0);
            c.2 += q;
        };
        if hex(f[1]) == 0x0101 {
            let enbv = hex(f[2]);
            for (p, t) in f[4..12].iter().enumerate() {
                if enbv & (1 << p) != 0 {
                    count(p, num(t, TIMES[p], file));
                }
            }
            entry.0 += 1;
        } else {
            count(8, num(f[3], "macc.pause_time", file));
        }
    }
    out
}

/// The report's `pfc` section in the shape of [`tshark_pauses`] (mirrors merged by MAC).
fn report_pauses(report: &Report) -> PauseCountsBySource {
    let mut out = PauseCountsBySource::new();
    for src in report.pfc.iter().flat_map(|p| &p.sources) {
        let entry = out.entry(src.src_mac.clone()).or_default();
        entry.0 += src.pfc_frames;
        let classes = src
            .priorities
            .iter()
            .map(|p| (usize::from(p.priority), &p.counts))
            .chain(src.link_pause.iter().map(|l| (8, l)));
        for (class, c) in classes {
            let e = &mut entry.1[class];
            e.0 += c.frames;
            e.1 += c.xon;
            e.2 += c.quanta;
        }
    }
    out
}

/// Decodes FILE with tshark and with replay, and lists every difference (per flow, in the
/// totals, and per PAUSE / PFC sender).
fn compare(file: &Path) -> Comparison {
    let (rows, ports) = tshark_rows(file);
    let want = tshark_flows(&rows);
    let report = replay(file);
    let mut diffs = differences(&want, &report);
    let t = &report.totals;
    let bytes: u64 = rows.iter().map(|r| r.ip_bytes).sum();
    let ce = rows.iter().filter(|r| r.ecn == 3).count() as u64;
    let cnp = rows.iter().filter(|r| r.opcode == 0x81).count() as u64;
    for (name, tv, ov) in [
        ("totals.roce_packets", rows.len() as u64, t.roce_packets),
        ("totals.roce_bytes", bytes, t.roce_bytes),
        ("totals.ce_packets", ce, t.ce_packets),
        ("totals.cnp_packets", cnp, t.cnp_packets),
    ] {
        if tv != ov {
            diffs.push(format!("{name}: tshark {tv}, replay {ov}"));
        }
    }
    let (want_pauses, got_pauses) = (tshark_pauses(file), report_pauses(&report));
    if want_pauses != got_pauses {
        diffs.push(format!(
            "pfc: tshark {want_pauses:?}, replay {got_pauses:?}"
        ));
    }
    eprintln!(
        "conformance: {}: {} flows, {} packets, {bytes} bytes, {} PAUSE/PFC senders compared with tshark (decode-as ports {ports:?}): {}",
        file.display(),
        want.len(),
        rows.len(),
        want_pauses.len(),
        if diffs.is_empty() {
            "equal".to_string()
        } else {
            format!("{} DIFFERENCES", diffs.len())
        }
    );
    Comparison {
        report,
        ports,
        diffs,
    }
}

/// Collects the differences of every file, then fails naming them all.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn add(&mut self, file: &Path, diffs: &[String]) {
        const SHOWN: usize = 40;
        if diffs.is_empty() {
            return;
        }
        let more = if diffs.len() > SHOWN {
            format!("\n  ... {} more", diffs.len() - SHOWN)
        } else {
            String::new()
        };
        self.0.push(format!(
            "{}: replay differs from tshark in {} places:\n  {}{more}",
            file.display(),
            diffs.len(),
            diffs[..diffs.len().min(SHOWN)].join("\n  ")
        ));
    }

    fn check(self) {
        assert!(self.0.is_empty(), "\n{}", self.0.join("\n"));
    }
}

// ---------------------------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------------------------

#[test]
fn opcode_mapping_follows_the_specification() {
    use Op::*;
    let cases = [
        (0x81, None, Cnp),
        (0x00, None, Send),
        (0x05, None, Send),
        (0x16, None, Send),
        (0x17, None, Send),
        (0x0A, None, Write),
        (0x0C, None, ReadRequest),
        (0x10, None, ReadResponse),
        (0x11, None, Ack),
        (0x11, Some(0x1F), Ack),
        (0x11, Some(0x21), RnrNak),
        (0x11, Some(0x60), Nak),
        (0x11, Some(0x40), Other),
        (0x12, None, AtomicAck),
        (0x14, None, Atomic),
        (0x15, None, Other),
        (0x24, None, Send),
        (0x2B, None, Write),
        (0x2C, None, Other),
        (0x51, Some(0x00), Ack),
        (0x56, None, Other),
        (0x64, None, Send),
        (0x66, None, Other),
        (0xAC, None, ReadRequest),
        (0xB7, None, Send),
        (0x80, None, Other),
        (0xC4, None, Other),
        (0xFF, None, Other),
    ];
    for (opcode, syndrome, want) in cases {
        assert_eq!(
            classify(opcode, syndrome),
            want,
            "opcode {opcode:#04x} {syndrome:?}"
        );
    }
}

/// The observer's opcode table, read through its classifier, against the specification's
/// mapping above: every opcode of every transport, with no AETH and with every syndrome.
#[test]
fn every_opcode_classifies_as_the_specification() {
    use observer_common::OpClass;
    let ours = |c: OpClass| match c {
        OpClass::Send => Op::Send,
        OpClass::Write => Op::Write,
        OpClass::ReadRequest => Op::ReadRequest,
        OpClass::ReadResponse => Op::ReadResponse,
        OpClass::Ack => Op::Ack,
        OpClass::Nak => Op::Nak,
        OpClass::RnrNak => Op::RnrNak,
        OpClass::Atomic => Op::Atomic,
        OpClass::AtomicAck => Op::AtomicAck,
        OpClass::Cnp => Op::Cnp,
        OpClass::Other => Op::Other,
    };
    let syndromes = std::iter::once(None).chain((0..=255u8).map(Some));
    let mut checked = 0;
    for opcode in 0..=255u8 {
        for syndrome in syndromes.clone() {
            assert_eq!(
                ours(observer_common::parse::classify(opcode, syndrome)),
                classify(opcode, syndrome),
                "opcode {opcode:#04x} syndrome {syndrome:?}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 256 * 257);
}

/// The extended headers the parser reads (RETH length, AETH syndrome), per opcode, as tshark
/// decodes them: one frame of every opcode every transport defines, with the transport's own
/// header (UD's DETH) before them. RD and XRC are left out: tshark 4.0 reads an RD packet's
/// RDETH 8 bytes late (its E2E context from the DETH's second word) and decodes nothing after
/// an XRC BTH; the parser's RD and XRC layouts are checked in observer-common's parser tests,
/// frames built from the specification.
#[test]
fn every_opcodes_headers_match_tshark() {
    use roce_observer::source::synth::{Frame, Ip, RoceFrame, write_pcap};
    if !have_tshark("every_opcodes_headers_match_tshark") {
        return;
    }
    let scratch = Scratch::new("opcodes");
    let opcodes: Vec<u8> = (0..=255u8)
        .filter(|&o| matches!(o >> 5, 0 | 1 | 3) && classify(o, Some(0x1F)) != Op::Other)
        .collect();
    assert_eq!(opcodes.len(), 23 + 12 + 2, "RC, UC, UD");
    let frames: Vec<Frame> = opcodes
        .iter()
        .enumerate()
        .map(|(i, &opcode)| {
            let ip = Ip::v4([198, 18, 0, 1].into(), [198, 18, 0, 2].into());
            let mut f = RoceFrame::new(ip, opcode, 0x11);
            f.ext.dma_len = 0x1000 + u32::from(opcode);
            f.ext.syndrome = 0x1F;
            f.payload_len = 8;
            Frame {
                bytes: f.to_bytes(),
                ts_ns: 1_000 * i as u64,
            }
        })
        .collect();
    let path = scratch.path("opcodes.pcap");
    write_pcap(std::fs::File::create(&path).unwrap(), &frames).unwrap();
    let fields = [
        "infiniband.bth.opcode",
        "infiniband.reth.dmalen",
        "infiniband.aeth.syndrome",
    ];
    let (out, _) = tshark_roce_fields(&path, &fields);
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows.len(), frames.len(), "one tshark row per frame");
    let (mut reths, mut aeths) = (0, 0);
    for ((row, frame), &opcode) in rows.iter().zip(&frames).zip(&opcodes) {
        let c: Vec<&str> = row.split('\t').collect();
        assert_eq!(num::<u8>(c[0], fields[0], &path), opcode);
        let p = observer_common::parse(&frame.bytes[..]).expect("a RoCE frame");
        let dma = (!c[1].is_empty()).then(|| num::<u32>(c[1], fields[1], &path));
        let syndrome = (!c[2].is_empty()).then(|| num::<u8>(c[2], fields[2], &path));
        assert_eq!(p.reth_dma_len(), dma, "opcode {opcode:#04x}: RETH length");
        assert_eq!(
            p.aeth.map(|a| a.syndrome),
            syndrome,
            "opcode {opcode:#04x}: AETH syndrome"
        );
        reths += usize::from(dma.is_some());
        aeths += usize::from(syndrome.is_some());
    }
    // Both kinds were there to compare (READ request, WRITE FIRST/ONLY; READ responses, ACKs).
    assert_eq!((reths, aeths), (4 + 3, 5), "RETHs (RC, UC), AETHs (RC)");
}

#[test]
fn synth_scenarios_match_tshark() {
    if !have_tshark("synth_scenarios_match_tshark") {
        return;
    }
    let tmp = Scratch::new("synth");
    let mut failures = Failures::default();
    for name in scenarios() {
        let file = integration_tests::synth_pcap(CLI, &tmp, name);
        let c = compare(&file);
        assert!(!c.report.flows.is_empty(), "{name}: no flows");
        if name == "pfc" {
            assert_eq!(
                c.report.pfc.as_ref().map(|p| p.sources.len()),
                Some(3),
                "pfc: PAUSE / PFC senders compared"
            );
        }
        failures.add(&file, &c.diffs);
    }
    failures.check();
}

/// RoCE from registered low UDP source ports (DNS 53, TFTP 69): tshark needs a decode-as for
/// each, the observer keys on the destination port alone.
#[test]
fn low_source_ports_match_tshark_with_decode_as() {
    use roce_observer::source::synth::{self, Ip, QpStream, Workload};
    if !have_tshark("low_source_ports_match_tshark_with_decode_as") {
        return;
    }
    let mut w = Workload::default();
    let host = |h: u8| std::net::Ipv4Addr::new(198, 18, 9, h);
    for (i, port) in [53u16, 69, 49152].into_iter().enumerate() {
        let h = 2 * i as u8 + 1;
        let mut qp = QpStream::new(
            0x00,
            Ip::v4(host(h), host(h + 1)),
            [
                synth::host_mac(0x900 + u16::from(h)),
                synth::host_mac(0x901 + u16::from(h)),
            ],
            [0x100 + i as u32, 0x200 + i as u32],
            1000,
        )
        .with_udp_src_port(port);
        for _ in 0..3 {
            qp.write(&mut w, 2048);
        }
        let psn = qp.last_psn();
        qp.ack(&mut w, psn);
    }
    let tmp = Scratch::new("lowport");
    let file = tmp.path("low-ports.pcap");
    let f = std::fs::File::create(&file).unwrap();
    synth::write_pcap(std::io::BufWriter::new(f), &w.frames).unwrap();
    let c = compare(&file);
    assert_eq!(c.ports, vec![53, 69], "decode-as ports tshark needed");
    assert_eq!(c.report.flows.len(), 6, "3 QPs, 2 directions");
    let mut failures = Failures::default();
    failures.add(&file, &c.diffs);
    failures.check();
}

/// The `*.pcap` files of the shared `real` captures, sorted (`None`, loudly, when missing).
fn real_pcaps(test: &str) -> Option<Vec<PathBuf>> {
    let dir = shared_captures(test, "real")?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.pcap in {}", dir.display());
    Some(files)
}

#[test]
fn real_captures_match_tshark() {
    let test = "real_captures_match_tshark";
    if !have_tshark(test) {
        return;
    }
    let Some(files) = real_pcaps(test) else {
        return;
    };
    let (mut flows, mut packets) = (0, 0);
    let mut failures = Failures::default();
    for file in &files {
        let mut c = compare(file);
        assert!(!c.report.flows.is_empty(), "{}: no flows", file.display());
        // Real captures have no loss and no retransmission.
        for f in &c.report.flows {
            if (f.psn.gaps, f.psn.regressions) != (0, 0) {
                c.diffs.push(format!(
                    "flow {}: psn gaps {}, regressions {} in a capture without loss",
                    TsharkFlowKey::of(f),
                    f.psn.gaps,
                    f.psn.regressions
                ));
            }
        }
        failures.add(file, &c.diffs);
        flows += c.report.flows.len();
        packets += c.report.totals.roce_packets;
    }
    eprintln!(
        "conformance: {} real captures, {flows} flows, {packets} packets compared with tshark",
        files.len()
    );
    failures.check();
}

#[test]
fn erf_capture_is_an_unsupported_link_type() {
    let test = "erf_capture_is_an_unsupported_link_type";
    let Some(dir) = shared_captures(test, "negative") else {
        return;
    };
    let file = dir.join("srinivaskoritala_infiniband_erf.pcap");
    let (status, out, err) = output(Command::new(CLI).arg("replay").arg(&file));
    assert_eq!(
        status.code(),
        Some(1),
        "replay {}: {status}: {out}{err}",
        file.display()
    );
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        vec![format!(
            "roce-observer: error: {}: unsupported link type ERF (197)",
            file.display()
        )],
        "stderr of replay {}",
        file.display()
    );
}

/// Connections on every real capture, against tshark: each RC or UC connection tshark shows packets
/// of both ways (two hosts, one UDP source port) is one connection of the report with both QP
/// numbers (each side's: the destination QP of what the other sent it), and the path MTU it
/// learned is the payload size of the FIRST and MIDDLE packets tshark decodes (their IP length
/// less the IPv4, UDP, BTH, extension headers, pad and ICRC).
#[test]
fn real_captures_connections_match_tshark() {
    let test = "real_captures_connections_match_tshark";
    if !have_tshark(test) {
        return;
    }
    let Some(files) = real_pcaps(test) else {
        return;
    };
    let mut failures = Failures::default();
    let mut joined = 0;
    for file in &files {
        let (rows, _) = tshark_rows(file);
        // Per (lower host, higher host, sport): the destination QPs each way,
        // and the FIRST/MIDDLE payload sizes.
        type Key = (IpAddr, IpAddr, u16);
        /// QPs each way, FIRST/MIDDLE payload sizes.
        type Seen = (BTreeSet<u32>, BTreeSet<u32>, BTreeSet<u64>);
        let mut want: BTreeMap<Key, Seen> = BTreeMap::new();
        // RC, UC and XRC opcodes (transport bits 0, 1, 5), connection management aside.
        let connected = |op: u8| matches!(op >> 5, 0 | 1 | 5);
        for r in rows
            .iter()
            .filter(|r| connected(r.opcode) && r.flow.qp != 1)
        {
            let (lo, hi) = if r.flow.src <= r.flow.dst {
                (r.flow.src, r.flow.dst)
            } else {
                (r.flow.dst, r.flow.src)
            };
            let e = want.entry((lo, hi, r.flow.sport)).or_default();
            if r.flow.src == lo {
                e.0.insert(r.flow.qp);
            } else {
                e.1.insert(r.flow.qp);
            }
            // SEND and WRITE FIRST/MIDDLE, READ RESPONSE FIRST/MIDDLE: RETH on WRITE FIRST, AETH
            // on READ RESPONSE FIRST.
            let ext = match r.opcode & 0x1F {
                0x00 | 0x01 | 0x07 | 0x0E => Some(0),
                0x06 => Some(16),
                0x0D => Some(4),
                _ => None,
            };
            if let Some(ext) = ext {
                e.2.insert(r.ip_bytes - 20 - 8 - 12 - ext - u64::from(r.pad) - 4);
            }
        }
        let report = replay(file);
        let mut diffs = Vec::new();
        for ((lo, hi, sport), (up, down, payloads)) in &want {
            let found: Vec<_> = report
                .connections
                .iter()
                .filter(|c| {
                    c.udp_src_port == *sport
                        && [c.a.ip, c.b.ip].contains(lo)
                        && [c.a.ip, c.b.ip].contains(hi)
                })
                .collect();
            if up.len() == 1 && down.len() == 1 {
                let [c] = found.as_slice() else {
                    diffs.push(format!(
                        "{lo} <-> {hi} sport {sport}: {} connections",
                        found.len()
                    ));
                    continue;
                };
                joined += 1;
                // The side `lo` receives what `hi` sent: its QP is the QP of down.
                let qp_of = |ip: &IpAddr| if ip == lo { down.first() } else { up.first() };
                for side in [&c.a, &c.b] {
                    if side.qp.as_ref() != qp_of(&side.ip) {
                        diffs.push(format!(
                            "{lo} <-> {hi} sport {sport}: side {} QP {:?}, tshark {:?}",
                            side.ip,
                            side.qp,
                            qp_of(&side.ip)
                        ));
                    }
                }
                let pmtu = match payloads.len() {
                    0 => None,
                    1 => payloads.first().map(|p| *p as u32),
                    _ => {
                        diffs.push(format!("{lo} <-> {hi}: FIRST/MIDDLE payloads {payloads:?}"));
                        continue;
                    }
                };
                if c.pmtu != pmtu {
                    diffs.push(format!(
                        "{lo} <-> {hi} sport {sport}: pmtu {:?}, tshark's FIRST/MIDDLE payloads {pmtu:?}",
                        c.pmtu
                    ));
                }
            } else if up.len() + down.len() > 0 && found.is_empty() {
                diffs.push(format!("{lo} <-> {hi} sport {sport}: no connection"));
            }
        }
        // Nothing else is a connection.
        let known = |c: &&roce_observer::model::connections::Connection| {
            let (lo, hi) = if c.a.ip <= c.b.ip {
                (c.a.ip, c.b.ip)
            } else {
                (c.b.ip, c.a.ip)
            };
            want.contains_key(&(lo, hi, c.udp_src_port))
        };
        for c in report.connections.iter().filter(|c| !known(c)) {
            diffs.push(format!(
                "{} <-> {} sport {}: not in tshark",
                c.a.ip, c.b.ip, c.udp_src_port
            ));
        }
        failures.add(file, &diffs);
    }
    eprintln!("conformance: {joined} connections joined as tshark shows them");
    assert!(joined >= 10, "{joined} connections");
    failures.check();
}

/// Messages on every real capture, against tshark: per direction of a connection, as many
/// messages of each kind, the same bytes and the same smallest and largest size as tshark's
/// decode says: a WRITE or READ its RETH DMA length (`infiniband.reth.dmalen`), a SEND the data
/// tshark shows in its packets from FIRST to LAST, pad bytes aside; and the report's p50 and p99
/// lie in the bucket (at most 25% wide) of the exact quantiles.
#[test]
fn real_captures_message_sizes_match_tshark() {
    let test = "real_captures_message_sizes_match_tshark";
    if !have_tshark(test) {
        return;
    }
    let Some(files) = real_pcaps(test) else {
        return;
    };
    let mut failures = Failures::default();
    let mut messages = 0;
    for file in &files {
        let (out, _) = tshark_roce_fields(
            file,
            &[
                "ip.src",
                "ip.dst",
                "udp.srcport",
                "infiniband.bth.opcode",
                "infiniband.bth.padcnt",
                "infiniband.reth.dmalen",
                "data.len",
            ],
        );
        // Per (source, destination, sport): [send, write, read] sizes, and the open SEND.
        type Dir = (IpAddr, IpAddr, u16);
        let mut want: BTreeMap<Dir, [Vec<u64>; 3]> = BTreeMap::new();
        let mut open: BTreeMap<Dir, u64> = BTreeMap::new();
        for line in out.lines().filter(|l| !l.is_empty()) {
            let c: Vec<&str> = line.split('\t').collect();
            assert_eq!(c.len(), 7, "{}: tshark row {line:?}", file.display());
            let opcode: u8 = num(c[3], "infiniband.bth.opcode", file);
            // RC, UC and XRC.
            if !matches!(opcode >> 5, 0 | 1 | 5) {
                continue;
            }
            let dir: Dir = (
                c[0].parse().unwrap(),
                c[1].parse().unwrap(),
                num(c[2], "udp.srcport", file),
            );
            let pad: u64 = num(c[4], "infiniband.bth.padcnt", file);
            let data: u64 = if c[6].is_empty() {
                0
            } else {
                num(c[6], "data.len", file)
            };
            let payload = data - pad;
            let dma = || -> u64 { num(c[5], "infiniband.reth.dmalen", file) };
            let sizes = want.entry(dir).or_default();
            match opcode & 0x1F {
                0x00 => {
                    open.insert(dir, payload);
                }
                0x01 => {
                    if let Some(o) = open.get_mut(&dir) {
                        *o += payload;
                    }
                }
                0x02 | 0x03 | 0x16 => {
                    if let Some(o) = open.remove(&dir) {
                        sizes[0].push(o + payload);
                    }
                }
                0x04 | 0x05 | 0x17 => sizes[0].push(payload),
                0x06 | 0x0A | 0x0B => sizes[1].push(dma()),
                0x0C => sizes[2].push(dma()),
                _ => {}
            }
        }
        let report = replay(file);
        let mut diffs = Vec::new();
        for ((src, dst, sport), sizes) in &want {
            let all: Vec<u64> = {
                let mut v: Vec<u64> = sizes.iter().flatten().copied().collect();
                v.sort();
                v
            };
            if all.is_empty() {
                continue;
            }
            let sides: Vec<_> = report
                .connections
                .iter()
                .filter(|c| c.udp_src_port == *sport)
                .flat_map(|c| [(&c.a, &c.b), (&c.b, &c.a)])
                .filter(|(s, o)| s.ip == *src && o.ip == *dst)
                .filter_map(|(s, _)| s.messages.as_ref())
                .collect();
            let [m] = sides.as_slice() else {
                diffs.push(format!(
                    "{src} -> {dst} sport {sport}: {} sides with messages, want 1 ({} messages)",
                    sides.len(),
                    all.len()
                ));
                continue;
            };
            messages += all.len();
            let got = (
                [m.send, m.write, m.read],
                m.bytes,
                m.min_bytes,
                m.max_bytes,
                m.unknown_size,
            );
            let exp = (
                sizes.clone().map(|v| v.len() as u64),
                all.iter().sum::<u64>(),
                all[0],
                all[all.len() - 1],
                0,
            );
            if got != exp {
                diffs.push(format!(
                    "{src} -> {dst} sport {sport}: ([send, write, read], bytes, min, max, unknown) replay {got:?}, tshark {exp:?}"
                ));
            }
            // The exact quantile (nearest rank) and the report's lie in one bucket.
            for (q, reported) in [(0.5, m.p50_bytes), (0.99, m.p99_bytes)] {
                let rank = ((q * all.len() as f64).ceil() as usize).clamp(1, all.len());
                let exact = all[rank - 1];
                let bucket = |v: u64| observer_common::MSG_SCALE.bucket(v);
                if bucket(exact) != bucket(reported) {
                    diffs.push(format!(
                        "{src} -> {dst} sport {sport}: p{} {reported}, exact {exact}",
                        q * 100.0
                    ));
                }
            }
        }
        failures.add(file, &diffs);
    }
    eprintln!("conformance: {messages} messages sized as tshark shows them");
    assert!(messages >= 50, "{messages} messages");
    failures.check();
}
