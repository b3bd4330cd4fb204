//! Joins the report's flows into connections: the two directions of an RC, UC or XRC
//! connection have swapped addresses and one observation (direct, or every mirror session
//! together), and are paired by [`super::pairing`] on their ports or their PSNs; each
//! direction's destination QP is the other side's QP number.

use std::collections::BTreeMap;

use observer_common::seq::pmtu_of;
use observer_common::{FlowKey, LatHist, LatKey, LatKind, MsgStats, QP_CM};

use super::Aggregate;
use super::pairing::{dir_of, scope_of};
use crate::model::connections::{
    ConnSide, Connection, LatencyScope, LatencySummary, Messages, OtherTraffic, PsnSummary,
    SideLatency, kind_name, side_name,
};
use crate::model::{Flow, ip_of};

pub use super::pairing::CONNECTED;
use super::pairing::{CNP, RC, UC, UD, XRC};

/// Two hosts (lower address first), the UDP source port, the observation: the daemon counts
/// connections by it.
pub type Group = ([u8; 16], [u8; 16], u16, u16);

pub fn group_of(k: &FlowKey) -> Group {
    let (lo, hi) = if k.src_ip <= k.dst_ip {
        (k.src_ip, k.dst_ip)
    } else {
        (k.dst_ip, k.src_ip)
    };
    (lo, hi, k.udp_src_port, scope_of(k))
}

/// The rows one direction of a connection sent: every mirror session's row of one flow.
#[derive(Default)]
struct Direction<'a> {
    rows: Vec<(&'a FlowKey, &'a Flow)>,
}

impl Aggregate {
    /// The connections among `rows` (the report's flows with their keys, in report order),
    /// most bytes first, and the traffic that is no connection. The directions are paired by
    /// [`Aggregate::pairing`], not by their UDP source port.
    pub(super) fn connections(
        &self,
        rows: &[(FlowKey, Flow)],
        pairing: &super::pairing::Pairing,
    ) -> (Vec<Connection>, Vec<OtherTraffic>) {
        let mut other = Vec::new();
        // The connected rows, in report order.
        let mut connected_rows: Vec<(&FlowKey, &Flow)> = Vec::new();
        for (k, f) in rows {
            let mask = self.flows.get(k).map_or(0, |s| s.transport_mask);
            let connected = mask & CONNECTED != 0 || mask == CNP;
            if k.dest_qp == QP_CM || (!connected && mask & UD != 0) {
                other.push(OtherTraffic {
                    kind: if k.dest_qp == QP_CM {
                        "management"
                    } else {
                        "UD"
                    }
                    .to_string(),
                    src_ip: f.src_ip,
                    dst_ip: f.dst_ip,
                    dest_qp: f.dest_qp,
                    udp_src_port: f.udp_src_port,
                    mirror: f.mirror.clone(),
                    packets: f.packets,
                    bytes: f.bytes,
                });
                continue;
            }
            if connected {
                connected_rows.push((k, f));
            }
        }
        // Per unit of the pairing, its rows each way (lo's, hi's), in report order.
        let mut units: Vec<[Direction; 2]> = Vec::new();
        units.resize_with(pairing.units.len(), Default::default);
        for (k, f) in connected_rows {
            let Some(&i) = pairing.unit_of.get(k) else {
                continue;
            };
            let way = usize::from(!pairing.units[i].lo.contains(k));
            units[i][way].rows.push((k, f));
        }
        let mut out = Vec::with_capacity(units.len());
        for (i, [x, y]) in units.iter().enumerate() {
            let u = &pairing.units[i];
            let Some((k, _)) = x.rows.first().or(y.rows.first()) else {
                continue;
            };
            let d = dir_of(k);
            let (lo, hi) = if d.0 <= d.1 { (d.0, d.1) } else { (d.1, d.0) };
            let (x, y) = (
                (!x.rows.is_empty()).then_some(x),
                (!y.rows.is_empty()).then_some(y),
            );
            let mut c = self.connection((lo, hi, d.3), x, y);
            c.paired_by = u.by.map(|b| b.name().to_string());
            c.ambiguous = u.ambiguous.map(|n| n as u32);
            out.push(c);
        }
        super::sort_large(&mut out, |c| {
            (
                std::cmp::Reverse(c.bytes),
                std::cmp::Reverse(c.packets),
                c.a.ip,
                c.b.ip,
                c.udp_src_port,
                c.a.qp,
            )
        });
        (out, other)
    }

    /// One connection between hosts `lo` and `hi` in observation `scope`: `x` what `lo` sent,
    /// `y` what `hi` sent.
    fn connection(
        &self,
        (lo, hi, scope): ([u8; 16], [u8; 16], u16),
        x: Option<&Direction>,
        y: Option<&Direction>,
    ) -> Connection {
        // The QP of a side: the destination QP of what the other side sent it.
        let qp_of = |d: Option<&Direction>| d.and_then(|d| d.rows.first().map(|(k, _)| k.dest_qp));
        let mut side_x = self.side(lo, hi, scope, x, qp_of(y));
        let mut side_y = self.side(hi, lo, scope, y, qp_of(x));
        // A: the side that sent more requests; with none either way (a responder seen alone),
        // the side that sent anything.
        if (side_y.requests(), side_y.packets) > (side_x.requests(), side_x.packets) {
            std::mem::swap(&mut side_x, &mut side_y);
        }
        let rows = || x.into_iter().chain(y).flat_map(|d| d.rows.iter());
        let mut mask = 0;
        let mut pmtu_mask = 0;
        let mut mirrors = Vec::new();
        let (mut first, mut last) = (u64::MAX, 0);
        for (k, f) in rows() {
            if let Some(s) = self.flows.get(k) {
                mask |= s.transport_mask;
            }
            if let Some(s) = self.analysis_of(k) {
                pmtu_mask |= s.seq.pmtu_mask;
            }
            if let Some(m) = &f.mirror
                && !mirrors.contains(m)
            {
                mirrors.push(m.clone());
            }
            first = first.min(f.first_seen_ns);
            last = last.max(f.last_seen_ns);
        }
        let transport = if mask & XRC != 0 {
            "XRC"
        } else if mask & RC != 0 {
            "RC"
        } else if mask & UC != 0 {
            "UC"
        } else {
            "RC"
        };
        let (packets, bytes) = (side_x.packets + side_y.packets, side_x.bytes + side_y.bytes);
        // The port of the side that sent more requests (its busiest), else the other's.
        let udp_src_port = side_x
            .ports
            .first()
            .or(side_y.ports.first())
            .copied()
            .unwrap_or(0);
        Connection {
            transport: transport.to_string(),
            udp_src_port,
            paired_by: None,
            ambiguous: None,
            mirrors,
            pmtu: pmtu_of(pmtu_mask),
            packets,
            bytes,
            first_seen_ns: if first == u64::MAX { 0 } else { first },
            last_seen_ns: last,
            active_rate_bps: (first != u64::MAX)
                .then(|| crate::model::active_rate_of(packets, bytes, first, last))
                .flatten(),
            a: side_x,
            b: side_y,
        }
    }

    /// The side `ip` (talking to `peer`) of a connection: the rows it sent, its QP number.
    fn side(
        &self,
        ip: [u8; 16],
        peer: [u8; 16],
        scope: u16,
        sent: Option<&Direction>,
        qp: Option<u32>,
    ) -> ConnSide {
        let mut s = ConnSide {
            ip: ip_of(ip),
            qp,
            ports: Vec::new(),
            packets: 0,
            bytes: 0,
            ops: Default::default(),
            ce: 0,
            psn: PsnSummary::default(),
            peak_rate_bps: None,
            messages: None,
            latency: SideLatency::default(),
            keys: Vec::new(),
        };
        // Its UDP source ports, the busiest first (few: a list, not a map).
        let mut ports: Vec<(u16, u64)> = Vec::new();
        for (k, f) in sent.into_iter().flat_map(|d| d.rows.iter()) {
            match ports.iter_mut().find(|(p, _)| *p == k.udp_src_port) {
                Some((_, b)) => *b += f.bytes,
                None => ports.push((k.udp_src_port, f.bytes)),
            }
            s.packets += f.packets;
            s.bytes += f.bytes;
            s.ops.add(&f.ops);
            s.ce += f.ecn.ce;
            s.psn.add(&f.psn);
            s.keys.push(**k);
        }
        // Messages are kept under each flow's analysis entry: one for every mirror session's
        // rows of a flow (none at all when none was posted).
        if !self.messages.is_empty() {
            let analysed = |k: &FlowKey| k.union().unwrap_or(*k);
            s.messages = match s.keys.as_slice() {
                // One flow, a side's usual: its messages as they are.
                [one] => self.messages.get(&analysed(one)).and_then(Messages::of),
                keys => {
                    let mut analysed: Vec<FlowKey> = keys.iter().map(analysed).collect();
                    analysed.sort();
                    analysed.dedup();
                    let mut messages = MsgStats::default();
                    for k in &analysed {
                        if let Some(m) = self.messages.get(k) {
                            messages.merge(m);
                        }
                    }
                    Messages::of(&messages)
                }
            };
        }
        ports.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        s.ports = ports.into_iter().map(|(p, _)| p).collect();
        // Its requests are timed under the port they travel with.
        let mut hist = [LatHist::default(); 2];
        let (mut skipped, mut conflicts) = (0, 0);
        let mut any = false;
        for port in &s.ports {
            let key = LatKey {
                requester: ip,
                responder: peer,
                udp_src_port: *port,
                mirror: scope,
                _pad: 0,
            };
            if let Some(l) = self.latency.get(&key) {
                any = true;
                for (h, o) in hist.iter_mut().zip(&l.hist) {
                    h.merge(o);
                }
                skipped += u64::from(l.skipped);
                conflicts += u64::from(l.conflicts);
            }
        }
        if any {
            s.latency = SideLatency {
                ack: LatencySummary::of(&hist[LatKind::Ack as usize]),
                read: LatencySummary::of(&hist[LatKind::Read as usize]),
                skipped,
                conflicts,
            };
        }
        s
    }

    /// The latency histograms of a capture, by side: a capture taken on one host holds both its
    /// own requests' round trips (`requests_out`) and its answers to others' requests
    /// (`requests_in`), which only the host's addresses tell apart: `local` when given, else
    /// the one address every connected flow of the capture has at one end. With no such
    /// address (a capture between switches, a mirror) every side is `requests_in`, the time
    /// from where the requests were seen to where the answers were; with two (the capture
    /// holds two hosts only) the host is unknown, and when both sent timed requests the
    /// returned line says their answers are together. Mirror copies stay `mirror`.
    pub fn capture_latency(&self, local: &[std::net::IpAddr]) -> (Vec<LatencyScope>, Vec<String>) {
        use observer_common::LatSide;
        let mut said = Vec::new();
        let local: Vec<[u8; 16]> = if local.is_empty() {
            self.capture_host(&mut said)
        } else {
            local.iter().map(|ip| crate::model::ip_bytes(*ip)).collect()
        };
        let mut hists: BTreeMap<(u8, u8), LatHist> = BTreeMap::new();
        for (k, l) in &self.latency {
            let side = if k.mirror != 0 {
                LatSide::Mirror
            } else if local.contains(&k.requester) {
                LatSide::RequestsOut
            } else {
                LatSide::RequestsIn
            };
            for kind in observer_common::LatKind::ALL {
                let h = &l.hist[kind as usize];
                if h.count > 0 {
                    hists.entry((kind as u8, side as u8)).or_default().merge(h);
                }
            }
        }
        let scopes = hists
            .iter()
            .filter_map(|((kind, side), h)| {
                Some(LatencyScope {
                    interface: None,
                    ifindex: 0,
                    kind: kind_name(*kind).to_string(),
                    side: side_name(LatSide::of(*side)).to_string(),
                    summary: LatencySummary::of(h)?,
                })
            })
            .collect();
        (scopes, said)
    }

    /// The host a capture was taken on: the one address at an end of every connected flow seen
    /// directly. None when there is no such address, or two (then, when both hosts' requests
    /// were timed, a line in `said`).
    pub fn capture_host(&self, said: &mut Vec<String>) -> Vec<[u8; 16]> {
        let mut common: Option<Vec<[u8; 16]>> = None;
        for (k, _) in self.connected_flows().filter(|(k, _)| !k.is_copy()) {
            let ends = [k.src_ip, k.dst_ip];
            common = Some(match common {
                None => ends.to_vec(),
                Some(c) => c.into_iter().filter(|a| ends.contains(a)).collect(),
            });
        }
        let mut common = common.unwrap_or_default();
        // In address order: the flows' order depends on the map (and the replay's threads).
        common.sort();
        match common.as_slice() {
            [one] => vec![*one],
            [a, b] => {
                let timed = |ip: &[u8; 16]| {
                    self.latency.iter().any(|(k, l)| {
                        k.mirror == 0 && k.requester == *ip && l.hist.iter().any(|h| h.count > 0)
                    })
                };
                if timed(a) && timed(b) {
                    said.push(format!(
                        "latency: the capture holds two hosts ({} and {}) that both sent timed requests, and which of them took it is unknown: requests_in holds both sides' answers (give --local-ip to split them)",
                        ip_of(*a),
                        ip_of(*b)
                    ));
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    /// The per-interface latency histograms, summarised (the interfaces unnamed: live capture
    /// names them, [`crate::model::Report::name_latency_interfaces`]).
    pub fn latency_scopes(&self) -> Vec<LatencyScope> {
        self.latency_scopes
            .iter()
            .filter_map(|(k, h)| {
                Some(LatencyScope {
                    interface: None,
                    ifindex: k.ifindex,
                    kind: kind_name(k.kind).to_string(),
                    side: side_name(observer_common::LatSide::of(k.side)).to_string(),
                    summary: LatencySummary::of(h)?,
                })
            })
            .collect()
    }
}
