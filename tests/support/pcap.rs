//! Captures and ground truth: pcap frames, the shared captures, the generator's truth as an
//! aggregate, and flows without their timing.

use observer_common::FlowKey;
use roce_observer::{aggregate::Aggregate, source::synth::Truth};

/// The ground truth of a synthetic workload as an [`Aggregate`].
pub fn truth_aggregate(t: &Truth) -> Aggregate {
    Aggregate {
        flows: t.flows.iter().map(|(k, v)| (*k, *v)).collect(),
        unions: Default::default(),
        cm_seen: Default::default(),
        cm_conns: t.cm.clone(),
        pauses: t.pauses.clone(),
        counters: t.counters,
        latency: Default::default(),
        latency_scopes: Default::default(),
        latency_links: Default::default(),
        messages: t
            .messages
            .iter()
            .map(|(k, m)| (*k, *m))
            .filter(|(_, m)| *m != Default::default())
            .collect(),
    }
}

/// The truth aggregate of `w` with each flow's PSN continuation state (its newest request and
/// answer PSNs and when) as the analysis ends on the workload's frames. The generator's truth
/// keeps counts, not that state; the report pairs directions whose ports differ, or that share
/// one port with other QPs, on it. Whether that pairing is right is tested against the
/// generator's own record of its connections (`tests/pairing.rs`); here it only lets a report
/// of the truth pair what a live report pairs. Flows seen directly and the analyses of mirror
/// sessions together get the state; a session's own flow keeps none, as observed.
pub fn with_tracks(mut agg: Aggregate, w: &roce_observer::source::synth::Workload) -> Aggregate {
    let mut parsed = Aggregate::new();
    for f in &w.frames {
        let _ = parsed.push(&f.bytes, f.ts_ns);
    }
    let track = |k: &FlowKey| {
        parsed
            .flows
            .get(&FlowKey { mirror: 0, ..*k })
            .map(|s| s.seq_track)
    };
    for (k, s) in agg.flows.iter_mut().filter(|(k, _)| !k.is_copy()) {
        if let Some(t) = track(k) {
            s.seq_track = t;
        }
    }
    for (k, s) in agg.unions.iter_mut() {
        if let Some(t) = track(k) {
            s.seq_track = t;
        }
    }
    agg
}

/// The aggregate `direct` (of traffic seen directly) as seen through mirror `mirror` (a
/// [`FlowKey::mirror`] value): each flow's counts under the mirror's key, its PSN analysis under
/// the key of every session together.
pub fn mirrored(direct: Aggregate, mirror: u16) -> Aggregate {
    let mut out = Aggregate {
        pauses: direct.pauses,
        counters: direct.counters,
        ..Aggregate::default()
    };
    for (k, s) in direct.flows {
        let key = FlowKey { mirror, ..k };
        out.flows.insert(key, s.counts_only());
        if let Some(u) = key.union() {
            out.unions.insert(u, s.analysis_only());
        }
    }
    for (k, m) in direct.messages {
        let key = FlowKey { mirror, ..k };
        out.messages.insert(key.union().unwrap_or(key), m);
    }
    out
}

/// Report flows without what depends on timing (times, rate), in a fixed order.
pub fn timeless(flows: &[roce_observer::model::Flow]) -> Vec<roce_observer::model::Flow> {
    let mut v: Vec<roce_observer::model::Flow> = flows
        .iter()
        .cloned()
        .map(|mut f| {
            f.first_seen_ns = 0;
            f.last_seen_ns = 0;
            f.rate_bps = 0.0;
            f.active_rate_bps = None;
            f.peak_rate_bps = None;
            f.psn.unanswered = None;
            f.psn.longest_resend_wait = None;
            f.psn.first_violation = None;
            f
        })
        .collect();
    v.sort_by_key(|f| {
        (
            f.src_ip,
            f.dst_ip,
            f.dest_qp,
            f.udp_src_port,
            f.mirror.as_ref().and_then(|m| m.session),
            f.direction,
        )
    });
    v
}

/// The frames of a classic little-endian pcap file (what the shared captures are).
pub fn pcap_frames(path: &std::path::Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(
        b[..4],
        [0xD4, 0xC3, 0xB2, 0xA1],
        "{}: a little-endian pcap",
        path.display()
    );
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let caplen = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        frames.push(b[at + 16..at + 16 + caplen].to_vec());
        at += 16 + caplen;
    }
    assert_eq!(at, b.len(), "{}: whole records", path.display());
    frames
}

/// The files of `../shared/captures/SUB`, sorted; `None` (loudly) when the folder is missing
/// outside CI, a failure under CI.
pub fn shared_capture_files(test: &str, sub: &str) -> Option<Vec<std::path::PathBuf>> {
    let dir = crate::workspace_root().join("../shared/captures").join(sub);
    if !dir.is_dir() {
        if std::env::var_os("CI").is_some() {
            panic!("{test}: {} missing under CI", dir.display());
        }
        eprintln!("\n*** SKIPPED {test}: {} missing ***\n", dir.display());
        return None;
    }
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    Some(files)
}

/// The generator's scenario `name` written by the CLI `cli` (`synth --scenario NAME -o`) to
/// `NAME.pcap` in `scratch`.
pub fn synth_pcap(cli: &str, scratch: &crate::Scratch, name: &str) -> std::path::PathBuf {
    let path = scratch.path(&format!("{name}.pcap"));
    let (status, _, err) = crate::output(
        std::process::Command::new(cli)
            .args(["synth", "--scenario", name, "-o"])
            .arg(&path),
    );
    assert!(status.success(), "synth --scenario {name}: {status}: {err}");
    path
}

/// Every capture there is to replay: the real ones (but the ERF file, an unsupported link
/// type) and every generated scenario, written by `cli` into `scratch`.
pub fn every_capture(cli: &str, scratch: &crate::Scratch, test: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<std::path::PathBuf> = shared_capture_files(test, "real")
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.extension().is_none_or(|e| e != "erf"))
        .collect();
    files.extend(
        roce_observer::source::synth::scenario_names().map(|name| synth_pcap(cli, scratch, name)),
    );
    files
}

/// The RoCEv2 frames of the capture `file` as tshark reads them: per frame, the `fields` asked
/// (`-T fields`), in order.
pub fn tshark_fields(file: &std::path::Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = std::process::Command::new("tshark");
    cmd.arg("-r")
        .arg(file)
        .args(["-Y", "udp.dstport == 4791", "-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// tshark's `frame.time_epoch` (seconds, up to 9 decimals) in unix ns.
pub fn epoch_ns(field: &str) -> u64 {
    let (s, frac) = field.trim().split_once('.').unwrap_or((field.trim(), "0"));
    let frac = format!("{frac:0<9}");
    s.parse::<u64>().unwrap() * 1_000_000_000 + frac[..9].parse::<u64>().unwrap()
}

/// The RoCEv2 frames' times in the capture `file` (unix ns), as tshark reads them.
pub fn tshark_times(file: &std::path::Path) -> Vec<u64> {
    tshark_fields(file, &["frame.time_epoch"])
        .iter()
        .map(|f| epoch_ns(&f[0]))
        .collect()
}
