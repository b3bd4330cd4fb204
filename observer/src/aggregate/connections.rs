//! Joins the report's flows into connections: the two directions of an RC, UC or XRC
//! connection have swapped addresses, one UDP source port and one observation (direct, or every
//! mirror session together); each direction's destination QP is the other side's QP number.

use std::collections::BTreeMap;

use observer_common::seq::{F_RESP, F_VALID, MAX_GO_BACK, pmtu_of, psn_sub};
use observer_common::{FlowKey, LatKey, LatKind, MIRROR_UNION, MsgStats, QP_CM};

use super::Aggregate;
use crate::model::connections::{
    ConnSide, Connection, LatencyScope, LatencySummary, Messages, OtherTraffic, PsnSummary,
    SideLatency, kind_name, side_name,
};
use crate::model::{Flow, ip_of};

/// `FlowStats::transport_mask` bits of the connected transports (RC, UC, XRC) and of CNPs.
const RC: u32 = 1;
const UC: u32 = 1 << 1;
const UD: u32 = 1 << 3;
const CNP: u32 = 1 << 4;
const XRC: u32 = 1 << 5;
/// The connected transports: RC, UC and XRC.
pub(crate) const CONNECTED: u32 = RC | UC | XRC;

/// The observation a flow belongs to: direct (either direction of a host), or every mirror
/// session together.
fn scope(k: &FlowKey) -> u16 {
    if k.mirror & 0x8000 != 0 {
        MIRROR_UNION
    } else {
        0
    }
}

/// Two hosts (lower address first), the UDP source port, the observation: one connection's
/// flows (the daemon counts connections by it too).
pub(crate) type Group = ([u8; 16], [u8; 16], u16, u16);

pub(crate) fn group_of(k: &FlowKey) -> Group {
    let (lo, hi) = if k.src_ip <= k.dst_ip {
        (k.src_ip, k.dst_ip)
    } else {
        (k.dst_ip, k.src_ip)
    };
    (lo, hi, k.udp_src_port, scope(k))
}

/// The rows one direction of a connection sent: every mirror session's row of one flow.
#[derive(Default)]
struct Direction<'a> {
    rows: Vec<(&'a FlowKey, &'a Flow)>,
}

impl Aggregate {
    /// The connections among `rows` (the report's flows with their keys, in report order),
    /// most bytes first, and the traffic that is no connection.
    pub(super) fn connections(
        &self,
        rows: &[(FlowKey, Flow)],
    ) -> (Vec<Connection>, Vec<OtherTraffic>) {
        let mut other = Vec::new();
        // Per group, per (sender, destination QP): the rows.
        let mut groups: BTreeMap<Group, BTreeMap<([u8; 16], u32), Direction>> = BTreeMap::new();
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
            if !connected {
                continue;
            }
            groups
                .entry(group_of(k))
                .or_default()
                .entry((k.src_ip, k.dest_qp))
                .or_default()
                .rows
                .push((k, f));
        }
        let mut out = Vec::new();
        for (g, dirs) in &groups {
            let (up, down): (Vec<_>, Vec<_>) = dirs.iter().partition(|((src, _), _)| *src == g.0);
            for (x, y) in self.pair(&up, &down) {
                out.push(self.connection(g, x, y));
            }
        }
        out.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(b.packets.cmp(&a.packets))
                .then(a.a.ip.cmp(&b.a.ip))
                .then(a.b.ip.cmp(&b.b.ip))
                .then(a.udp_src_port.cmp(&b.udp_src_port))
                .then(a.a.qp.cmp(&b.a.qp))
        });
        (out, other)
    }

    /// Pairs the directions of one group: one each way is one connection; several (two
    /// connections between the same hosts on one UDP port) pair where one direction's
    /// answers follow the other's requests (the newest answer within reach of the next
    /// request PSN), and stay one-sided where that is not unique.
    #[allow(clippy::type_complexity)]
    fn pair<'a, 'b>(
        &self,
        up: &'b [(&'a ([u8; 16], u32), &'b Direction<'a>)],
        down: &'b [(&'a ([u8; 16], u32), &'b Direction<'a>)],
    ) -> Vec<(Option<&'b Direction<'a>>, Option<&'b Direction<'a>>)> {
        if up.len() <= 1 && down.len() <= 1 {
            return vec![(up.first().map(|d| d.1), down.first().map(|d| d.1))];
        }
        let answers = |req: &Direction, resp: &Direction| {
            req.rows.iter().any(|(rk, _)| {
                let Some(r) = self.analysis(rk) else {
                    return false;
                };
                resp.rows.iter().any(|(ak, _)| {
                    self.analysis(ak).is_some_and(|a| {
                        r.seq_track.flags & F_VALID != 0
                            && a.seq_track.flags & F_RESP != 0
                            && psn_sub(r.seq_track.next_hi, a.seq_track.resp_psn) < MAX_GO_BACK
                    })
                })
            })
        };
        let linked = |u: &Direction, d: &Direction| answers(u, d) || answers(d, u);
        let mut out = Vec::new();
        let mut used_down = vec![false; down.len()];
        for (_, u) in up {
            let cands: Vec<usize> = (0..down.len()).filter(|j| linked(u, down[*j].1)).collect();
            let unique = match cands.as_slice() {
                [j] => up.iter().filter(|(_, u2)| linked(u2, down[*j].1)).count() == 1,
                _ => false,
            };
            if unique {
                used_down[cands[0]] = true;
                out.push((Some(*u), Some(down[cands[0]].1)));
            } else {
                out.push((Some(*u), None));
            }
        }
        for (j, (_, d)) in down.iter().enumerate() {
            if !used_down[j] {
                out.push((None, Some(*d)));
            }
        }
        out
    }

    /// The entry holding a row's PSN analysis (a mirror copy's is every session's).
    fn analysis(&self, k: &FlowKey) -> Option<&observer_common::FlowStats> {
        match k.union() {
            Some(u) => self.unions.get(&u),
            None => self.flows.get(k),
        }
    }

    fn connection(&self, g: &Group, x: Option<&Direction>, y: Option<&Direction>) -> Connection {
        let (lo, hi) = (g.0, g.1);
        // The QP of a side: the destination QP of what the other side sent it.
        let qp_of = |d: Option<&Direction>| d.and_then(|d| d.rows.first().map(|(k, _)| k.dest_qp));
        let mut side_x = self.side(lo, hi, g, x, qp_of(y));
        let mut side_y = self.side(hi, lo, g, y, qp_of(x));
        if side_y.requests() > side_x.requests() {
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
            if let Some(s) = self.analysis(k) {
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
        Connection {
            transport: transport.to_string(),
            udp_src_port: g.2,
            mirrors,
            pmtu: pmtu_of(pmtu_mask),
            packets,
            bytes,
            first_seen_ns: if first == u64::MAX { 0 } else { first },
            last_seen_ns: last,
            active_rate_bps: (last > first && first != u64::MAX)
                .then(|| bytes as f64 * 8.0 * 1e9 / (last - first) as f64),
            a: side_x,
            b: side_y,
        }
    }

    /// The side `ip` (talking to `peer`) of a connection: the rows it sent, its QP number.
    fn side(
        &self,
        ip: [u8; 16],
        peer: [u8; 16],
        g: &Group,
        sent: Option<&Direction>,
        qp: Option<u32>,
    ) -> ConnSide {
        let mut s = ConnSide {
            ip: ip_of(ip),
            qp,
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
        for (k, f) in sent.into_iter().flat_map(|d| d.rows.iter()) {
            s.packets += f.packets;
            s.bytes += f.bytes;
            s.ops.add(&f.ops);
            s.ce += f.ecn.ce;
            s.psn.add(&f.psn);
            s.keys.push(**k);
        }
        // Messages are kept under each flow's analysis entry: one for every mirror session's
        // rows of a flow.
        let mut analysed: Vec<FlowKey> = s.keys.iter().map(|k| k.union().unwrap_or(*k)).collect();
        analysed.sort();
        analysed.dedup();
        let mut messages = MsgStats::default();
        for k in &analysed {
            if let Some(m) = self.messages.get(k) {
                messages.merge(m);
            }
        }
        s.messages = Messages::of(&messages);
        let key = LatKey {
            requester: ip,
            responder: peer,
            udp_src_port: g.2,
            mirror: g.3,
            _pad: 0,
        };
        if let Some(l) = self.latency.get(&key) {
            s.latency = SideLatency {
                ack: LatencySummary::of(&l.hist[LatKind::Ack as usize]),
                read: LatencySummary::of(&l.hist[LatKind::Read as usize]),
                skipped: u64::from(l.skipped),
                conflicts: u64::from(l.conflicts),
            };
        }
        s
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
