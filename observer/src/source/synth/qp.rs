//! Queue pair streams: [`QpStream`] emits the correctly sequenced requests of one RC/UC/XRC queue
//! pair and the responder's answers, and injects loss and go-back-N retransmission, recording each
//! PSN event into the truth as it injects it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use observer_common::wire::{self, op};
use observer_common::{Bth, OpClass, VlanTag};

use super::frame::{Ext, Ip, RoceFrame, intended_class, intended_message};
use super::workload::{ConnTruth, PsnEvent, Workload};
use super::{
    CE, CNP_DSCP, DEFAULT_PKEY, MASK24, NOT_ECT, SCENARIO_PMTU, SYNDROME_ACK, SYNDROME_RNR_NAK,
    flow_label_to_udp_sport, rdma_udp_sport,
};

/// PSNs a READ of `len` bytes consumes at path MTU `pmtu`: ceil(len / pmtu), at least 1.
fn read_psns(len: u32, pmtu: u32) -> u32 {
    len.div_ceil(pmtu.max(1)).max(1)
}

/// (a - b) mod 2^24.
fn psn_sub(a: u32, b: u32) -> u32 {
    a.wrapping_sub(b) & MASK24
}

/// Opcodes (low 5 bits) of the packets of a multi-packet message.
#[derive(Clone, Copy)]
struct Segments {
    first: u8,
    middle: u8,
    last: u8,
    only: u8,
}

const WRITE: Segments = Segments {
    first: op::WRITE_FIRST,
    middle: op::WRITE_MIDDLE,
    last: op::WRITE_LAST,
    only: op::WRITE_ONLY,
};
const WRITE_IMM: Segments = Segments {
    last: op::WRITE_LAST_IMM,
    only: op::WRITE_ONLY_IMM,
    ..WRITE
};
const SEND: Segments = Segments {
    first: op::SEND_FIRST,
    middle: op::SEND_MIDDLE,
    last: op::SEND_LAST,
    only: op::SEND_ONLY,
};
const SEND_IMM: Segments = Segments {
    last: op::SEND_LAST_IMM,
    only: op::SEND_ONLY_IMM,
    ..SEND
};
const SEND_INV: Segments = Segments {
    last: op::SEND_LAST_INV,
    only: op::SEND_ONLY_INV,
    ..SEND
};
const READ_RESPONSE: Segments = Segments {
    first: op::READ_RESPONSE_FIRST,
    middle: op::READ_RESPONSE_MIDDLE,
    last: op::READ_RESPONSE_LAST,
    only: op::READ_RESPONSE_ONLY,
};

/// Requests kept for go-back-N retransmission.
const HISTORY: usize = 4096;

/// The RNR timer the generated requesters wait out (10.24 ms, one of the IBTA RNR timer
/// values): longer than the analysis's resend threshold, as a lab's timings may stretch.
pub const RNR_WAIT_NS: u64 = 10_240_000;

/// One RC/UC/XRC queue pair: emits correctly sequenced request packets (requester to responder) and
/// the responder's ACKs, NAKs, READ responses and CNPs, and lets a scenario inject loss (a gap of n
/// PSNs) and go-back-N retransmission, recording those events into the truth as it injects them.
///
/// The PSN events follow the observer's rules (docs/wire.md): requests of RC/UC/XRC only; a READ
/// of L bytes makes the next request PSN acceptable anywhere in [psn + ceil(L/4096),
/// psn + ceil(L/256)] (the stream itself advances by ceil(L/pmtu)); beyond that a jump is one gap,
/// missing = the distance past the end of that range; a backward step is one regression.
/// How the two ends of a connection choose their UDP source ports: the rules real NICs and
/// drivers follow, so that the observer's pairing is tested on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortRule {
    /// mlx5 and the Linux drivers since the 2022 "make the source UDP port vary" series: a
    /// flow label from the product of both QPNs, the same port both ways.
    Symmetric,
    /// Soft-RoCE (rxe) before that series: 0xC000 plus a 14-bit hash of the sender's own QPN,
    /// so each direction has its own port.
    LocalQpn,
    /// A fixed port per QP on each side (drivers that take it from a per-QP context, an
    /// application's choice): (requester's, responder's).
    Fixed(u16, u16),
    /// An IPv6 flow label set per QP by each side's application (`rdma_set_option` or the
    /// GRH of `ibv_modify_qp`): (requester's label, responder's label), each side's port from
    /// its own label.
    FlowLabels(u32, u32),
}

impl PortRule {
    /// The ports (requester's, responder's) for requester QP `req_qpn` and responder QP
    /// `resp_qpn`.
    pub fn ports(self, req_qpn: u32, resp_qpn: u32) -> (u16, u16) {
        match self {
            Self::Symmetric => {
                let p = rdma_udp_sport(req_qpn, resp_qpn);
                (p, p)
            }
            Self::LocalQpn => (rxe_local_sport(req_qpn), rxe_local_sport(resp_qpn)),
            Self::Fixed(a, b) => (a, b),
            Self::FlowLabels(a, b) => (flow_label_to_udp_sport(a), flow_label_to_udp_sport(b)),
        }
    }
}

/// Soft-RoCE's source port before the 2022 series: `0xC000 + hash_32(qpn, 14)` (the kernel's
/// multiplicative `hash_32` with `GOLDEN_RATIO_32`), from the sender's own QPN only.
pub fn rxe_local_sport(qpn: u32) -> u16 {
    0xC000 | ((qpn.wrapping_mul(0x61C8_8647) >> (32 - 14)) as u16 & 0x3FFF)
}

#[derive(Clone, Debug)]
pub struct QpStream {
    /// Template of the requester's packets (addresses, tags, TOS, ports, P_Key, dest QP). Its `ext`
    /// supplies the per-QP values of every request (XRC SRQ, EE context).
    pub req: RoceFrame,
    /// Template of the responder's packets (the reverse direction, dest QP = requester's QP).
    pub resp: RoceFrame,
    /// Path MTU used to segment messages and READ responses.
    pub pmtu: u32,
    /// When non-zero, every `ce_every`-th new request is CE-marked (a congested path).
    pub ce_every: u32,
    /// When set, every frame of this QP is cut to this many bytes (a truncating mirror session).
    pub snap: Option<usize>,
    /// DSCP the responder sends its CNPs with ([`CNP_DSCP`] unless [`QpStream::with_cnp_dscp`]).
    cnp_dscp: u8,
    transport: u8,
    next_psn: u32,
    /// The observer's acceptable range for the next request PSN, once it saw a request.
    expect: Option<(u32, u32)>,
    drop_next: u32,
    /// PSNs the observer saw skipped and has not seen since (lost, unless they come late).
    holes: BTreeSet<u32>,
    /// In a resend: whether the next resent packet behind the expected PSN starts the episode.
    resending: Option<bool>,
    /// What the next request is, when the scenario says so (a copy, a late packet).
    intent: Option<PsnEvent>,
    /// The request direction carried a FIRST or MIDDLE packet: the observer knows the PMTU.
    pmtu_seen: bool,
    /// The last READ request: PSN and DMA length.
    last_read: Option<(u32, u32)>,
    /// While set, requests are built and kept here instead of emitted (to emit them reordered).
    held: Option<Vec<RoceFrame>>,
    /// The request being emitted lies inside the last READ's range under these path MTUs.
    overlap: u32,
    /// The SENDs of several packets, by the PSN of their LAST: their FIRST's PSN and length.
    sends: BTreeMap<u32, (u32, u64)>,
    /// The PSN of the last message boundary the observer sees for the first time.
    boundary_seen: Option<u32>,
    /// The observer never saw the PSN of the request being emitted before.
    fresh: bool,
    /// A request PSN jumped ahead (or the QP started again) since the last boundary emitted.
    jumped: bool,
    msn: u32,
    requests: u64,
    ce_since_cnp: u32,
    /// Capture timestamp of the last CNP.
    last_cnp_ns: Option<u64>,
    since_ack: u32,
    va: u64,
    history: VecDeque<RoceFrame>,
}

impl QpStream {
    /// A queue pair of `transport` (`wire::TRANSPORT_RC`, `_UC` or `_XRC`) from `macs[0]`/`ip.src`
    /// (QP `qpns[0]`) to `macs[1]`/`ip.dst` (QP `qpns[1]`), starting at `first_psn`, with DSCP 26
    /// ECT(0), P_Key 0xFFFF, PMTU 1024 and the UDP source port the Linux drivers would choose
    /// (from the flow label when an IPv6 one is set).
    pub fn new(transport: u8, ip: Ip, macs: [[u8; 6]; 2], qpns: [u32; 2], first_psn: u32) -> Self {
        let transport = transport & 0xE0;
        let sport = match ip {
            Ip::V6 { flow_label, .. } if flow_label & 0xF_FFFF != 0 => {
                flow_label_to_udp_sport(flow_label)
            }
            _ => rdma_udp_sport(qpns[0], qpns[1]),
        };
        let mut req = RoceFrame::new(ip, transport | op::SEND_ONLY, qpns[1]);
        req.src_mac = macs[0];
        req.dst_mac = macs[1];
        req.udp_src_port = sport;
        let mut resp = req.clone();
        resp.src_mac = macs[1];
        resp.dst_mac = macs[0];
        resp.ip = ip.reversed();
        resp.bth.dest_qp = qpns[0] & MASK24;
        Self {
            req,
            resp,
            pmtu: SCENARIO_PMTU,
            ce_every: 0,
            snap: None,
            cnp_dscp: CNP_DSCP,
            transport,
            next_psn: first_psn & MASK24,
            expect: None,
            drop_next: 0,
            holes: BTreeSet::new(),
            resending: None,
            intent: None,
            pmtu_seen: false,
            last_read: None,
            held: None,
            overlap: 0,
            sends: BTreeMap::new(),
            boundary_seen: None,
            fresh: false,
            jumped: false,
            msn: 0,
            requests: 0,
            ce_since_cnp: 0,
            last_cnp_ns: None,
            since_ack: 0,
            va: 0x7F00_0000_0000 | (u64::from(qpns[0]) << 24),
            history: VecDeque::new(),
        }
    }

    /// Sets the VLAN tags of both directions.
    pub fn with_vlans(mut self, vlans: &[VlanTag]) -> Self {
        self.req.vlans = vlans.to_vec();
        self.resp.vlans = vlans.to_vec();
        self
    }

    /// Sets DSCP and ECN of both directions.
    pub fn with_tos(mut self, dscp: u8, ecn: u8) -> Self {
        for f in [&mut self.req, &mut self.resp] {
            f.dscp = dscp;
            f.ecn = ecn;
        }
        self
    }

    /// Sets the UDP source port of both directions.
    pub fn with_udp_src_port(mut self, port: u16) -> Self {
        self.req.udp_src_port = port;
        self.resp.udp_src_port = port;
        self
    }

    /// Sets the UDP source ports by a NIC's rule ([`PortRule`]): the requester's packets get
    /// the first, the responder's the second.
    pub fn with_port_rule(mut self, rule: PortRule) -> Self {
        let (req, resp) = rule.ports(self.resp.bth.dest_qp, self.req.bth.dest_qp);
        self.req.udp_src_port = req;
        self.resp.udp_src_port = resp;
        if let PortRule::FlowLabels(a, b) = rule {
            self.req.ip = self.req.ip.with_flow_label(a);
            self.resp.ip = self.resp.ip.with_flow_label(b);
        }
        self
    }

    /// Sets the UDP source port of the requester's packets only (a NIC or load balancer that
    /// re-sprays the connection onto another path from the next packet on).
    pub fn set_request_port(&mut self, port: u16) {
        self.req.udp_src_port = port;
    }

    /// Sets the UDP source port of the responder's packets only.
    pub fn set_response_port(&mut self, port: u16) {
        self.resp.udp_src_port = port;
    }

    /// The UDP source ports (requester's, responder's).
    pub fn ports(&self) -> (u16, u16) {
        (self.req.udp_src_port, self.resp.udp_src_port)
    }

    /// Sets the DSCP of the responder's CNPs (by default [`CNP_DSCP`]), e.g. 0 for a NIC whose
    /// CNPs are left in best effort.
    pub fn with_cnp_dscp(mut self, dscp: u8) -> Self {
        self.cnp_dscp = dscp & 63;
        self
    }

    /// The PSN the next new request gets.
    pub fn next_psn(&self) -> u32 {
        self.next_psn
    }

    /// The PSN of the most recent request.
    pub fn last_psn(&self) -> u32 {
        psn_sub(self.next_psn, 1)
    }

    /// The next `n` request packets are lost upstream of the observation point: they consume PSNs
    /// (and stay available for retransmission) but are not emitted.
    pub fn lose_next(&mut self, n: u32) {
        self.drop_next += n;
    }

    /// Emits one request packet with operation `low_op` (low 5 bits; the transport is the QP's) and
    /// returns its PSN. AckReq is set on packets that end a message.
    pub fn request(&mut self, w: &mut Workload, low_op: u8, ext: Ext, payload_len: usize) -> u32 {
        let low = low_op & 0x1F;
        let mut f = self.req.clone();
        f.bth.opcode = self.transport | low;
        f.bth.psn = self.next_psn;
        f.bth.ack_req = !matches!(
            low,
            op::SEND_FIRST | op::SEND_MIDDLE | op::WRITE_FIRST | op::WRITE_MIDDLE
        );
        f.ext = Ext {
            xrc_srq: self.req.ext.xrc_srq,
            ee_ctx: self.req.ext.ee_ctx,
            ..ext
        };
        f.payload_len = payload_len;
        self.requests += 1;
        if self.ce_every != 0 && self.requests.is_multiple_of(u64::from(self.ce_every)) {
            f.ecn = CE;
        }
        self.emit_request(w, f)
    }

    fn emit_request(&mut self, w: &mut Workload, f: RoceFrame) -> u32 {
        let psn = f.bth.psn & MASK24;
        let is_read = f.bth.opcode & 0x1F == op::READ_REQUEST;
        let consumed = if is_read {
            read_psns(f.ext.dma_len, self.pmtu)
        } else {
            1
        };
        self.next_psn = psn.wrapping_add(consumed) & MASK24;
        if let Some(held) = &mut self.held {
            held.push(f);
            return psn;
        }
        self.history.push_back(f.clone());
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
        if self.drop_next > 0 {
            self.drop_next -= 1;
            return psn;
        }
        let keep = self.snap.unwrap_or(usize::MAX);
        let class = intended_class(f.bth.opcode, 0);
        let mut event = PsnEvent::None;
        self.fresh = false;
        let tracked = matches!(
            self.transport,
            wire::TRANSPORT_RC | wire::TRANSPORT_UC | wire::TRANSPORT_XRC
        );
        if tracked && class.is_request() && keep >= f.bth_end() {
            event = self.psn_event(&f, keep);
        }
        if f.ecn == CE {
            self.ce_since_cnp += 1;
        }
        self.since_ack += 1;
        self.push(w, &f, class, event);
        if tracked {
            self.message_truth(w, &f, keep);
        }
        psn
    }

    /// The message request `f` (cut to `keep` bytes) completes, as the observer must count it:
    /// when it sees the PSN for the first time, a WRITE or READ as long as the scenario made it
    /// (unknown when the RETH is cut off), a SEND too when its FIRST was the boundary seen last
    /// before its LAST and no PSN jumped ahead in between.
    fn message_truth(&mut self, w: &mut Workload, f: &RoceFrame, keep: usize) {
        let low = f.bth.opcode & 0x1F;
        let message = intended_message(f, keep);
        if message.is_none() && low != op::SEND_FIRST {
            return;
        }
        // At every boundary, sent again or not, the observer notes whether a PSN jumped since
        // the previous one.
        let jumped = std::mem::take(&mut self.jumped);
        if !self.fresh {
            return;
        }
        let psn = f.bth.psn & MASK24;
        let before = self.boundary_seen.replace(psn);
        // A SEND's FIRST opens it, and completes nothing.
        let Some((kind, mut size)) = message else {
            return;
        };
        if matches!(low, op::SEND_LAST | op::SEND_LAST_IMM | op::SEND_LAST_INV) {
            size = self
                .sends
                .get(&psn)
                .filter(|(first, _)| before == Some(*first) && !jumped)
                .map(|(_, len)| *len);
        }
        w.truth
            .messages
            .entry(self.req.flow_key())
            .or_default()
            .record(kind, size);
    }

    /// What the observer must make of request `f` (cut to `keep` bytes): the scenario's
    /// intent, within what the observer can see (the expected range, the holes it saw).
    fn psn_event(&mut self, f: &RoceFrame, keep: usize) -> PsnEvent {
        let psn = f.bth.psn & MASK24;
        let is_read = f.bth.opcode & 0x1F == op::READ_REQUEST;
        if matches!(
            f.bth.opcode & 0x1F,
            op::SEND_FIRST | op::SEND_MIDDLE | op::WRITE_FIRST | op::WRITE_MIDDLE
        ) {
            self.pmtu_seen = true;
        }
        self.fresh = true;
        let forced = self.intent.take();
        let overlap = match self.last_read {
            Some((read_psn, len)) if !is_read => {
                let off = psn_sub(psn, read_psn);
                let mask = (0..5u32)
                    .filter(|k| off > 0 && off < 1 << 23 && off < read_psns(len, 256 << k))
                    .fold(0, |m, k| m | 1 << k);
                (mask != 0).then_some(mask)
            }
            _ => None,
        };
        self.overlap = overlap.unwrap_or(0);
        // A violation under every candidate path MTU, or under the one the observer knows.
        if let Some(mask) = overlap
            && (mask == 0b1_1111
                || (self.pmtu_seen && mask & observer_common::seq::pmtu_bit(self.pmtu) != 0))
        {
            // Never marked seen by the observer: no message.
            self.fresh = false;
            return PsnEvent::Violation;
        }
        match (self.expect, forced) {
            (_, Some(PsnEvent::NewIncarnation)) | (None, _) => {
                let first = self.expect.is_none();
                self.jumped = true;
                self.holes.clear();
                self.advance(psn, f, keep);
                if first {
                    PsnEvent::None
                } else {
                    PsnEvent::NewIncarnation
                }
            }
            (Some((lo, hi)), forced) => {
                let ahead = psn_sub(psn, lo);
                if ahead <= psn_sub(hi, lo) {
                    self.advance(psn, f, keep);
                    PsnEvent::None
                } else if ahead < 1 << 23 {
                    self.jumped = true;
                    let mut p = hi;
                    while p != psn {
                        self.holes.insert(p);
                        p = (p + 1) & MASK24;
                    }
                    self.advance(psn, f, keep);
                    PsnEvent::Gap
                } else {
                    let filled = self.holes.remove(&psn);
                    self.fresh = filled;
                    match (self.resending, forced) {
                        (Some(first), _) => {
                            self.resending = Some(false);
                            PsnEvent::Retransmission { episode: first }
                        }
                        (None, Some(e)) => e,
                        (None, None) if filled => PsnEvent::OutOfOrder,
                        (None, None) => PsnEvent::Duplicate,
                    }
                }
            }
        }
    }

    /// The observer's expected range after request `f` at `psn`: a READ of a PMTU it does not
    /// know consumes 1 to 16 times as many PSNs as one it knows.
    fn advance(&mut self, psn: u32, f: &RoceFrame, keep: usize) {
        let is_read = f.bth.opcode & 0x1F == op::READ_REQUEST;
        let (lo, hi) = match (is_read, keep >= f.headers_end()) {
            (true, true) if self.pmtu_seen => {
                let n = read_psns(f.ext.dma_len, self.pmtu);
                (n, n)
            }
            (true, true) => (
                read_psns(f.ext.dma_len, wire::PMTU_MAX),
                read_psns(f.ext.dma_len, wire::PMTU_MIN),
            ),
            // The observer cannot see the DMA length of a READ cut inside its RETH.
            (true, false) => (1, (1 << 23) - 1),
            _ => (1, 1),
        };
        self.last_read = match (is_read, keep >= f.headers_end()) {
            (true, true) => Some((psn, f.ext.dma_len)),
            (true, false) => None,
            _ => self.last_read,
        };
        self.expect = Some((psn.wrapping_add(lo) & MASK24, psn.wrapping_add(hi) & MASK24));
    }

    /// The holes the observer saw and never saw filled: lost PSNs and their contiguous ranges.
    pub fn lost(&self) -> (u64, u64) {
        let events = self
            .holes
            .iter()
            .filter(|&&p| !self.holes.contains(&(p.wrapping_sub(1) & MASK24)))
            .count();
        (self.holes.len() as u64, events as u64)
    }

    fn push(&mut self, w: &mut Workload, f: &RoceFrame, class: OpClass, event: PsnEvent) {
        if class != OpClass::Cnp {
            let (req_ip, resp_ip) = self.req.ip.mapped();
            let key = ConnTruth {
                requester: req_ip,
                requester_qp: self.resp.bth.dest_qp & MASK24,
                responder: resp_ip,
                responder_qp: self.req.bth.dest_qp & MASK24,
            };
            let ways = w.truth.connections.entry(key).or_default();
            ways[usize::from(f.ip.mapped().0 != req_ip)] = true;
        }
        match self.snap {
            Some(keep) => w.push_cut(f, class, event, keep),
            None => w.push_roce_psn(f, class, event),
        }
        if self.overlap != 0 {
            w.overlap(&self.req.flow_key(), self.overlap);
            self.overlap = 0;
        }
        if class.is_request() && self.expect.is_some() {
            let (lost, events) = self.lost();
            if let Some(s) = w.truth.flows.get_mut(&self.req.flow_key()) {
                (s.seq.lost, s.seq.lost_events) = (lost, events);
            }
        }
    }

    fn message(&mut self, w: &mut Workload, ops: Segments, len: usize, ext: Ext) -> u32 {
        let pmtu = self.pmtu.max(1) as usize;
        let n = len.div_ceil(pmtu).max(1);
        let mut psn = self.next_psn;
        if ops.first == op::SEND_FIRST && n > 1 {
            let last = psn.wrapping_add(n as u32 - 1) & MASK24;
            self.sends.insert(last, (psn, len as u64));
        }
        for i in 0..n {
            let low = match i {
                _ if n == 1 => ops.only,
                0 => ops.first,
                _ if i == n - 1 => ops.last,
                _ => ops.middle,
            };
            let payload = if i == n - 1 { len - i * pmtu } else { pmtu };
            psn = self.request(w, low, ext, payload);
        }
        self.msn = (self.msn + 1) & MASK24;
        psn
    }

    fn remote(&mut self, len: usize) -> Ext {
        let ext = Ext {
            va: self.va,
            rkey: 0x0001_2345,
            dma_len: len as u32,
            ..Ext::default()
        };
        self.va += len as u64;
        ext
    }

    /// An RDMA WRITE of `len` bytes (first/middle/last or only); returns the last PSN.
    pub fn write(&mut self, w: &mut Workload, len: usize) -> u32 {
        let ext = self.remote(len);
        self.message(w, WRITE, len, ext)
    }

    /// An RDMA WRITE with immediate (last-imm or only-imm).
    pub fn write_imm(&mut self, w: &mut Workload, len: usize, imm: u32) -> u32 {
        let ext = Ext {
            imm,
            ..self.remote(len)
        };
        self.message(w, WRITE_IMM, len, ext)
    }

    /// A SEND of `len` bytes.
    pub fn send(&mut self, w: &mut Workload, len: usize) -> u32 {
        self.message(w, SEND, len, Ext::default())
    }

    /// A SEND with immediate.
    pub fn send_imm(&mut self, w: &mut Workload, len: usize, imm: u32) -> u32 {
        let ext = Ext {
            imm,
            ..Ext::default()
        };
        self.message(w, SEND_IMM, len, ext)
    }

    /// A SEND with invalidate of `rkey`.
    pub fn send_inv(&mut self, w: &mut Workload, len: usize, rkey: u32) -> u32 {
        let ext = Ext {
            rkey,
            ..Ext::default()
        };
        self.message(w, SEND_INV, len, ext)
    }

    /// An RDMA READ request of `dma_len` bytes followed by its responses (first/middle/last or
    /// only, one per PMTU, AETH on first/last/only); returns the request PSN.
    pub fn read(&mut self, w: &mut Workload, dma_len: u32) -> u32 {
        let psn = self.read_request(w, dma_len);
        self.read_response(w, psn, dma_len);
        psn
    }

    /// An RDMA READ request of `dma_len` bytes alone (the responder answers it later with
    /// [`QpStream::read_response`]); returns its PSN.
    pub fn read_request(&mut self, w: &mut Workload, dma_len: u32) -> u32 {
        let ext = self.remote(dma_len as usize);
        let psn = self.request(w, op::READ_REQUEST, ext, 0);
        self.msn = (self.msn + 1) & MASK24;
        psn
    }

    /// The responses to the READ request at `psn` of `dma_len` bytes: first/middle/last or
    /// only, one per PMTU, AETH on first/last/only.
    pub fn read_response(&mut self, w: &mut Workload, psn: u32, dma_len: u32) {
        let pmtu = self.pmtu.max(1) as usize;
        let len = dma_len as usize;
        let n = len.div_ceil(pmtu).max(1);
        for i in 0..n {
            let low = match i {
                _ if n == 1 => READ_RESPONSE.only,
                0 => READ_RESPONSE.first,
                _ if i == n - 1 => READ_RESPONSE.last,
                _ => READ_RESPONSE.middle,
            };
            let payload = if i == n - 1 { len - i * pmtu } else { pmtu };
            let ext = self.aeth(SYNDROME_ACK);
            self.response(w, low, psn.wrapping_add(i as u32), ext, payload);
        }
    }

    /// An atomic (`op::COMPARE_SWAP` or `op::FETCH_ADD`) and its ATOMIC ACKNOWLEDGE; returns the
    /// request PSN.
    pub fn atomic(&mut self, w: &mut Workload, low_op: u8, swap_add: u64, compare: u64) -> u32 {
        let ext = Ext {
            swap_add,
            compare,
            ..self.remote(8)
        };
        let psn = self.request(w, low_op, ext, 0);
        self.msn = (self.msn + 1) & MASK24;
        let ack = Ext {
            atomic_orig: compare,
            ..self.aeth(SYNDROME_ACK)
        };
        self.response(w, op::ATOMIC_ACKNOWLEDGE, psn, ack, 0);
        psn
    }

    fn aeth(&self, syndrome: u8) -> Ext {
        Ext {
            syndrome,
            msn: self.msn,
            ..Ext::default()
        }
    }

    fn response(&mut self, w: &mut Workload, low_op: u8, psn: u32, ext: Ext, payload_len: usize) {
        let mut f = self.resp.clone();
        f.bth.opcode = self.transport | (low_op & 0x1F);
        f.bth.psn = psn & MASK24;
        f.ext = ext;
        f.payload_len = payload_len;
        let class = intended_class(f.bth.opcode, ext.syndrome);
        self.push(w, &f, class, PsnEvent::None);
    }

    /// The responder acknowledges everything up to `psn` (one coalesced ACK).
    pub fn ack(&mut self, w: &mut Workload, psn: u32) {
        self.since_ack = 0;
        let ext = self.aeth(SYNDROME_ACK);
        self.response(w, op::ACKNOWLEDGE, psn, ext, 0);
    }

    /// ACKs the most recent request when at least `every` requests arrived since the last ACK.
    pub fn ack_if_due(&mut self, w: &mut Workload, every: u32) {
        if self.since_ack >= every.max(1) {
            let psn = self.last_psn();
            self.ack(w, psn);
        }
    }

    /// The responder sends an ACKNOWLEDGE with `syndrome` (NAK or RNR NAK) naming `psn`.
    pub fn nak(&mut self, w: &mut Workload, psn: u32, syndrome: u8) {
        let ext = self.aeth(syndrome);
        self.response(w, op::ACKNOWLEDGE, psn, ext, 0);
    }

    /// The responder (notification point) sends a CNP to the requester's QP: opcode 0x81, BECN,
    /// P_Key 0xFFFF, PSN 0, DSCP 48 (or the one set with [`QpStream::with_cnp_dscp`]), Not-ECT.
    pub fn cnp(&mut self, w: &mut Workload) {
        self.ce_since_cnp = 0;
        self.last_cnp_ns = Some(w.next_ts());
        let mut f = self.resp.clone();
        f.bth = Bth {
            opcode: wire::OPCODE_CNP,
            becn: true,
            pkey: DEFAULT_PKEY,
            dest_qp: self.resp.bth.dest_qp,
            psn: 0,
            ..Bth::default()
        };
        f.ext = Ext::default();
        f.payload_len = 0;
        f.dscp = self.cnp_dscp;
        f.ecn = NOT_ECT;
        self.push(w, &f, OpClass::Cnp, PsnEvent::None);
    }

    /// Sends a CNP if any request was CE-marked since the last one (a rate-limited notification
    /// point); returns whether it did.
    pub fn cnp_if_marked(&mut self, w: &mut Workload) -> bool {
        let marked = self.ce_since_cnp > 0;
        if marked {
            self.cnp(w);
        }
        marked
    }

    /// Like a NIC's notification point with a per-QP CNP timer: sends a CNP if a request was
    /// CE-marked since the last call and the last CNP lies at least `interval_ns` of capture time
    /// back; marks seen while the timer runs are dropped. Returns whether it sent one.
    pub fn cnp_rate_limited(&mut self, w: &mut Workload, interval_ns: u64) -> bool {
        if self.ce_since_cnp == 0 {
            return false;
        }
        let due = self
            .last_cnp_ns
            .is_none_or(|last| w.next_ts() - last >= interval_ns);
        if due {
            self.cnp(w);
        } else {
            self.ce_since_cnp = 0;
        }
        due
    }

    /// An RDMA WRITE of `len` bytes whose packets reach the observer in `order` (indexes into
    /// the message's packets, each once): reordered on the way (adaptive routing, spraying).
    pub fn write_reordered(&mut self, w: &mut Workload, len: usize, order: &[usize]) -> u32 {
        self.held = Some(Vec::new());
        let last = self.write(w, len);
        let frames = self.held.take().unwrap_or_default();
        let next = self.next_psn;
        assert_eq!(order.len(), frames.len(), "one index per packet");
        for &i in order {
            self.emit_request(w, frames[i].clone());
        }
        self.next_psn = next;
        last
    }

    /// The observer sees the last request again (a mirror or tap copying it twice).
    pub fn duplicate_last(&mut self, w: &mut Workload) {
        if let Some(f) = self.history.back().cloned() {
            let next = self.next_psn;
            self.emit_request(w, f);
            self.next_psn = next;
        }
    }

    /// A faulty requester: an RDMA READ of `dma_len` bytes (with its responses), then a SEND
    /// of `len` bytes that reuses the READ's last PSN, as if the READ had consumed one PSN
    /// fewer. Returns the READ's PSN.
    pub fn read_then_overlap(&mut self, w: &mut Workload, dma_len: u32, len: usize) -> u32 {
        let psn = self.read(w, dma_len);
        self.next_psn = psn_sub(self.next_psn, 1);
        self.send(w, len);
        psn
    }

    /// The QP number is reused by a new connection starting at `first_psn` (after a pause the
    /// caller makes with [`Workload::wait`]).
    pub fn reincarnate(&mut self, first_psn: u32) {
        self.next_psn = first_psn & MASK24;
        self.intent = Some(PsnEvent::NewIncarnation);
        self.last_read = None;
    }

    /// The connection manager sets the connection up (again): a REQ from the requester's host
    /// to the responder's, the REP back and the RTU, each a 256-byte MAD in a UD SEND to QP 1
    /// (Q_Key 0x80010000), unreliable datagrams that are no request of this QP. The REQ names
    /// the requester's QP and the PSN its requests start at (the next one), the REP the
    /// responder's QP (and a PSN of its own); the truth keeps what they said.
    pub fn cm_exchange(&mut self, w: &mut Workload) {
        use observer_common::cm::{CM_REP, CM_REQ, CmKey, CmMad};
        let req_qpn = self.resp.bth.dest_qp;
        let rep_qpn = self.req.bth.dest_qp;
        let comm = 0x1000_0000 | req_qpn;
        let rep_psn = (rep_qpn.wrapping_mul(2_654_435_761) >> 8) & MASK24;
        let req = CmMad {
            attr: CM_REQ,
            local_comm: comm,
            qpn: req_qpn,
            psn: self.next_psn,
            ..CmMad::default()
        };
        let rep = CmMad {
            attr: CM_REP,
            local_comm: 0x2000_0000 | rep_qpn,
            remote_comm: comm,
            qpn: rep_qpn,
            psn: rep_psn,
            ..CmMad::default()
        };
        let rtu = CmMad {
            attr: 0x0014,
            local_comm: comm,
            remote_comm: rep.local_comm,
            ..CmMad::default()
        };
        for (i, (template, mad)) in [(&self.req, req), (&self.resp, rep), (&self.req, rtu)]
            .into_iter()
            .enumerate()
        {
            let mut f = template.clone();
            f.bth.opcode = wire::TRANSPORT_UD | op::SEND_ONLY;
            f.bth.dest_qp = observer_common::QP_CM;
            f.bth.psn = i as u32;
            f.bth.ack_req = false;
            f.ext = Ext {
                qkey: 0x8001_0000,
                src_qp: observer_common::QP_CM,
                ..Ext::default()
            };
            f.payload_len = 256;
            f.payload_head = cm_mad_bytes(&mad, i as u64);
            w.push_roce(&f, OpClass::Send);
        }
        let mut key = CmKey::default();
        if key.set(&req, &self.req.flow_key()) {
            let conn = w.truth.cm.entry(key).or_default();
            conn.record(&req);
            conn.record(&rep);
        }
    }

    /// The responder has no receive posted for the request at `psn`: it answers with an RNR NAK,
    /// the requester waits out the RNR timer and sends it again, the responder ACKs it.
    pub fn rnr_retry(&mut self, w: &mut Workload, psn: u32) {
        self.nak(w, psn, SYNDROME_RNR_NAK);
        w.wait(RNR_WAIT_NS);
        self.retransmit_from(w, psn);
        self.ack(w, psn);
    }

    /// Go-back-N: re-emits every remembered request from `psn` on, in order, and returns how many.
    /// The first one steps back (a regression unless nothing after it was seen). Returns 0 when
    /// `psn` is not a remembered request PSN.
    pub fn retransmit_from(&mut self, w: &mut Workload, psn: u32) -> usize {
        let Some(pos) = self.history.iter().position(|f| f.bth.psn == psn) else {
            return 0;
        };
        let frames: Vec<RoceFrame> = self.history.drain(pos..).collect();
        let n = frames.len();
        self.resending = Some(true);
        for f in frames {
            self.emit_request(w, f);
        }
        self.resending = None;
        n
    }
}

/// The first bytes of a CM MAD saying `m` (InfiniBand Architecture vol. 1, 12.6): the MAD
/// header (base version 1, class 0x07, class version 2, method Send, transaction `tid`,
/// attribute `m.attr`), then the REQ's or REP's fields at their offsets.
fn cm_mad_bytes(m: &observer_common::cm::CmMad, tid: u64) -> Vec<u8> {
    use observer_common::cm::{CM_REP, CM_REQ, MGMT_CLASS_CM};
    let mut b = vec![0u8; 24 + 72];
    b[0] = 1;
    b[1] = MGMT_CLASS_CM;
    b[2] = 2;
    b[3] = 0x03;
    b[8..16].copy_from_slice(&(0x5eed_0000_0000_0000 | tid).to_be_bytes());
    b[16..18].copy_from_slice(&m.attr.to_be_bytes());
    let d = 24;
    b[d..d + 4].copy_from_slice(&m.local_comm.to_be_bytes());
    b[d + 4..d + 8].copy_from_slice(&m.remote_comm.to_be_bytes());
    let (qpn_at, psn_at) = match m.attr {
        CM_REQ => (32, 44),
        CM_REP => (12, 20),
        _ => return b,
    };
    // 24 bits each, the 8 bits after them (other fields) left 0.
    b[d + qpn_at..d + qpn_at + 4].copy_from_slice(&(m.qpn << 8).to_be_bytes());
    b[d + psn_at..d + psn_at + 4].copy_from_slice(&(m.psn << 8).to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::synth::scenarios::qp_v4;

    #[test]
    fn read_consumes_psns_by_pmtu_and_responses_use_them() {
        let mut w = Workload::default();
        let mut qp = qp_v4(wire::TRANSPORT_RC, 9, [1, 2], [1, 2], 100);
        let psn = qp.read(&mut w, 65536);
        assert_eq!(psn, 100);
        assert_eq!(qp.next_psn(), 164);
        assert_eq!(w.len(), 1 + 64);
        qp.write(&mut w, 1024);
        assert_eq!(w.truth.flows[&qp.req.flow_key()].psn_gaps, 0);
        // A loss right after a READ: the observer accepts up to ceil(65536/256) = 256 PSNs past
        // the READ's PSN while the stream moved on by 64 (no FIRST or MIDDLE packet told it the
        // PMTU), so 100 lost PSNs go unnoticed and 300 show as a gap of 64 + 300 - 256.
        qp.read(&mut w, 65536);
        qp.lose_next(100);
        qp.write(&mut w, 101 * 1024);
        assert_eq!(w.truth.flows[&qp.req.flow_key()].psn_gaps, 0);
        qp.read(&mut w, 65536);
        qp.lose_next(300);
        qp.write(&mut w, 301 * 1024);
        let s = w.truth.flows[&qp.req.flow_key()];
        assert_eq!((s.psn_gaps, s.seq.lost), (1, 64 + 300 - 256));
    }
}
