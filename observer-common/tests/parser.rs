//! The parser and the flow accounting against hand-built frames.
//!
//! Expectations come from docs/wire.md and the IBTA header tables (IBTA annex A16/A17,
//! Linux rxe_opcode.c), never from the parser's own code.

use observer_common::wire::op;
use observer_common::{
    Aeth, Bth, Counters, FlowKey, FlowStats, LINK_PAUSE, OpClass, PauseStats, RocePacket,
    SkipReason, Transport, VlanTag, parse, parse_frame, seq,
};

// ---------------------------------------------------------------------------------------------
// Frame builder
// ---------------------------------------------------------------------------------------------

const SRC4: [u8; 4] = [198, 18, 0, 1];
const DST4: [u8; 4] = [198, 19, 7, 200];
const SRC6: [u8; 16] = [
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
];
const DST6: [u8; 16] = [
    0x20, 0x01, 0x0d, 0xb8, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66,
];
const SPORT: u16 = 0xC0DE;
const ROCE_PORT: u16 = 4791;
/// DSCP 26, ECN ECT(0).
const TOS: u8 = (26 << 2) | 0b10;

/// `::ffff:a.b.c.d`
fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[10] = 0xFF;
    m[11] = 0xFF;
    m[12..].copy_from_slice(&a);
    m
}

#[derive(Clone, Debug)]
enum Ip {
    V4 {
        tos: u8,
        options: Vec<u8>,
        /// Flags and fragment offset (bytes 6-7).
        frag: u16,
        proto: u8,
    },
    V6 {
        traffic_class: u8,
        flow_label: u32,
        next_header: u8,
    },
}

/// An Ethernet / VLAN / IP / UDP frame around a UDP payload.
#[derive(Clone, Debug)]
struct Frame {
    /// (TPID, TCI), outermost first.
    vlans: Vec<(u16, u16)>,
    ip: Ip,
    sport: u16,
    dport: u16,
}

/// A serialized frame and the offsets of its layers.
#[derive(Clone, Debug)]
struct Built {
    bytes: Vec<u8>,
    ip: usize,
    l4: usize,
    bth: usize,
}

impl Built {
    fn set_u8(&mut self, off: usize, v: u8) {
        self.bytes[off] = v;
    }

    fn set_u16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_be_bytes());
    }

    fn cut(&self, len: usize) -> &[u8] {
        &self.bytes[..len]
    }

    fn bth_end(&self) -> usize {
        self.bth + 12
    }
}

fn tci(pcp: u8, dei: bool, vid: u16) -> u16 {
    (u16::from(pcp) << 13) | (u16::from(dei) << 12) | vid
}

impl Frame {
    fn v4() -> Self {
        Frame {
            vlans: Vec::new(),
            ip: Ip::V4 {
                tos: TOS,
                options: Vec::new(),
                frag: 0x4000, // DF only: not a fragment
                proto: 17,
            },
            sport: SPORT,
            dport: ROCE_PORT,
        }
    }

    fn v6() -> Self {
        Frame {
            vlans: Vec::new(),
            ip: Ip::V6 {
                traffic_class: TOS,
                flow_label: 0xABCDE,
                next_header: 17,
            },
            sport: SPORT,
            dport: ROCE_PORT,
        }
    }

    fn vlan(mut self, tpid: u16, pcp: u8, dei: bool, vid: u16) -> Self {
        self.vlans.push((tpid, tci(pcp, dei, vid)));
        self
    }

    fn tos(mut self, v: u8) -> Self {
        match &mut self.ip {
            Ip::V4 { tos, .. } => *tos = v,
            Ip::V6 { traffic_class, .. } => *traffic_class = v,
        }
        self
    }

    fn options(mut self, words: usize) -> Self {
        if let Ip::V4 { options, .. } = &mut self.ip {
            // NOPs, then an end-of-list in the last byte.
            *options = vec![1; words * 4];
            if let Some(last) = options.last_mut() {
                *last = 0;
            }
        }
        self
    }

    fn frag(mut self, v: u16) -> Self {
        if let Ip::V4 { frag, .. } = &mut self.ip {
            *frag = v;
        }
        self
    }

    /// IPv4 protocol or IPv6 next header.
    fn proto(mut self, v: u8) -> Self {
        match &mut self.ip {
            Ip::V4 { proto, .. } => *proto = v,
            Ip::V6 { next_header, .. } => *next_header = v,
        }
        self
    }

    fn ports(mut self, sport: u16, dport: u16) -> Self {
        self.sport = sport;
        self.dport = dport;
        self
    }

    fn build(&self, udp_payload: &[u8]) -> Built {
        let mut b = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
        for (tpid, tci) in &self.vlans {
            b.extend(tpid.to_be_bytes());
            b.extend(tci.to_be_bytes());
        }
        let udp_len = 8 + udp_payload.len();
        let ip = b.len() + 2;
        match &self.ip {
            Ip::V4 {
                tos,
                options,
                frag,
                proto,
            } => {
                assert!(options.len() % 4 == 0 && options.len() <= 40);
                let hl = 20 + options.len();
                b.extend(0x0800u16.to_be_bytes());
                b.extend([0x40 | (hl / 4) as u8, *tos]);
                b.extend(((hl + udp_len) as u16).to_be_bytes());
                b.extend([0x12, 0x34]);
                b.extend(frag.to_be_bytes());
                b.extend([64, *proto, 0, 0]);
                b.extend(SRC4);
                b.extend(DST4);
                b.extend(options);
                let sum = ipv4_checksum(&b[ip..ip + hl]);
                b[ip + 10..ip + 12].copy_from_slice(&sum.to_be_bytes());
            }
            Ip::V6 {
                traffic_class,
                flow_label,
                next_header,
            } => {
                b.extend(0x86DDu16.to_be_bytes());
                let word =
                    (6u32 << 28) | (u32::from(*traffic_class) << 20) | (flow_label & 0xFFFFF);
                b.extend(word.to_be_bytes());
                b.extend((udp_len as u16).to_be_bytes());
                b.extend([*next_header, 64]);
                b.extend(SRC6);
                b.extend(DST6);
            }
        }
        let l4 = b.len();
        b.extend(self.sport.to_be_bytes());
        b.extend(self.dport.to_be_bytes());
        b.extend((udp_len as u16).to_be_bytes());
        b.extend([0, 0]);
        b.extend(udp_payload);
        Built {
            bytes: b,
            ip,
            l4,
            bth: l4 + 8,
        }
    }
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// A frame with any EtherType and body (ARP, LLDP, PFC, ...).
fn raw_frame(vlans: &[(u16, u16)], ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut b = vec![0x01, 0x80, 0xC2, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x01];
    for (tpid, tci) in vlans {
        b.extend(tpid.to_be_bytes());
        b.extend(tci.to_be_bytes());
    }
    b.extend(ethertype.to_be_bytes());
    b.extend(body);
    b.resize(b.len().max(60), 0);
    b
}

/// The UDP payload of a RoCEv2 packet: BTH, extended transport headers, data, ICRC.
#[derive(Clone, Debug)]
struct Roce(Vec<u8>);

const PKEY: u16 = 0xFFFF;
const VA: u64 = 0x1111_2222_3333_4444;
const RKEY: u32 = 0x5555_6666;

impl Roce {
    /// A BTH with P_Key 0xFFFF and all flags clear.
    fn bth(opcode: u8, dest_qp: u32, psn: u32) -> Self {
        let mut b = vec![opcode, 0];
        b.extend(PKEY.to_be_bytes());
        // Byte 4 (FECN, BECN) and byte 8 (AckReq) are the clear top bytes of these words.
        b.extend((dest_qp & 0xFF_FFFF).to_be_bytes());
        b.extend((psn & 0xFF_FFFF).to_be_bytes());
        Roce(b)
    }

    fn raw_bth(bth: [u8; 12]) -> Self {
        Roce(bth.to_vec())
    }

    fn push(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }

    fn reth(self, len: u32) -> Self {
        self.push(&VA.to_be_bytes())
            .push(&RKEY.to_be_bytes())
            .push(&len.to_be_bytes())
    }

    fn aeth(self, a: Aeth) -> Self {
        self.push(&((u32::from(a.syndrome) << 24) | a.msn).to_be_bytes())
    }

    /// Q_Key, then a reserved byte (set, to check it is masked) and the 24-bit source QP.
    fn deth(self, qkey: u32, src_qp: u32) -> Self {
        self.push(&qkey.to_be_bytes())
            .push(&(0xA5_000000 | src_qp).to_be_bytes())
    }

    fn rdeth(self) -> Self {
        self.push(&0x00_0ABCDEu32.to_be_bytes())
    }

    fn xrceth(self) -> Self {
        self.push(&0x00_00BEEFu32.to_be_bytes())
    }

    fn imm(self) -> Self {
        self.push(&0xDEAD_BEEFu32.to_be_bytes())
    }

    fn ieth(self) -> Self {
        self.push(&0x7777_8888u32.to_be_bytes())
    }

    /// VA, R_Key, swap/add data, compare data.
    fn atomic_eth(self) -> Self {
        self.push(&VA.to_be_bytes())
            .push(&RKEY.to_be_bytes())
            .push(&[0x99; 16])
    }

    fn atomic_ack_eth(self) -> Self {
        self.push(&[0x42; 8])
    }

    /// `n` payload bytes that are not zero, so a header read where there is none shows.
    fn data(self, n: usize) -> Self {
        let d: Vec<u8> = (0..n).map(|i| 0xE0 | (i as u8 & 0x0F)).collect();
        self.push(&d)
    }

    /// Appends the ICRC and returns the UDP payload.
    fn icrc(self) -> Vec<u8> {
        self.push(&[0xC1, 0xC2, 0xC3, 0xC4]).0
    }
}

fn parse_ok(bytes: &[u8]) -> RocePacket {
    match parse(bytes) {
        Ok(p) => p,
        Err(e) => panic!("expected a RoCEv2 packet, got {e:?} for {bytes:02x?}"),
    }
}

fn bth(opcode: u8, dest_qp: u32, psn: u32) -> Bth {
    Bth {
        opcode,
        pkey: PKEY,
        dest_qp,
        psn,
        ..Bth::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Operation classes and extended transport headers, per transport
// ---------------------------------------------------------------------------------------------

/// What the parser must report about the headers after the BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    class: OpClass,
    transport: Transport,
    reth_dma_len: Option<u32>,
    aeth: Option<Aeth>,
    deth: Option<(u32, u32)>,
}

fn seen(p: &RocePacket) -> Seen {
    assert_eq!(p.deth_qkey.is_some(), p.deth_src_qp.is_some());
    Seen {
        class: p.op_class(),
        transport: p.bth.transport(),
        reth_dma_len: p.reth_dma_len(),
        aeth: p.aeth,
        deth: p.deth_qkey.zip(p.deth_src_qp),
    }
}

/// The headers the IBTA tables put after the BTH and the transport's own headers for operation
/// `low` (distinct values per operation), with the class and optional headers the parser must
/// report. The caller fills in transport and DETH.
fn with_op_headers(low: u8, r: Roce) -> (Roce, Seen) {
    let len = 0x0001_0000 + u32::from(low);
    let a = Aeth {
        syndrome: 0x1F,
        msn: 0x00AB_CD00 | u32::from(low),
    };
    let (r, class, reth, aeth) = match low {
        op::SEND_FIRST | op::SEND_MIDDLE | op::SEND_LAST | op::SEND_ONLY => {
            (r, OpClass::Send, None, None)
        }
        op::SEND_LAST_IMM | op::SEND_ONLY_IMM => (r.imm(), OpClass::Send, None, None),
        op::SEND_LAST_INV | op::SEND_ONLY_INV => (r.ieth(), OpClass::Send, None, None),
        op::WRITE_FIRST | op::WRITE_ONLY => (r.reth(len), OpClass::Write, Some(len), None),
        op::WRITE_ONLY_IMM => (r.reth(len).imm(), OpClass::Write, Some(len), None),
        op::WRITE_MIDDLE | op::WRITE_LAST => (r, OpClass::Write, None, None),
        op::WRITE_LAST_IMM => (r.imm(), OpClass::Write, None, None),
        op::READ_REQUEST => (r.reth(len), OpClass::ReadRequest, Some(len), None),
        op::READ_RESPONSE_MIDDLE => (r, OpClass::ReadResponse, None, None),
        op::READ_RESPONSE_FIRST | op::READ_RESPONSE_LAST | op::READ_RESPONSE_ONLY => {
            (r.aeth(a), OpClass::ReadResponse, None, Some(a))
        }
        op::ACKNOWLEDGE => (r.aeth(a), OpClass::Ack, None, Some(a)),
        op::ATOMIC_ACKNOWLEDGE => (
            r.aeth(a).atomic_ack_eth(),
            OpClass::AtomicAck,
            None,
            Some(a),
        ),
        op::COMPARE_SWAP | op::FETCH_ADD => (r.atomic_eth(), OpClass::Atomic, None, None),
        _ => unreachable!("no such operation {low:#x}"),
    };
    let seen = Seen {
        class,
        transport: Transport::Rc,
        reth_dma_len: reth,
        aeth,
        deth: None,
    };
    (r, seen)
}

const RC_OPS: [u8; 23] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17,
];
const QP: u32 = 0x00AB_CDEF;
const QKEY: u32 = 0x8001_2345;
const SRC_QP: u32 = 0x00FE_DCBA;

fn is_response(low: u8) -> bool {
    (op::READ_RESPONSE_FIRST..=op::ATOMIC_ACKNOWLEDGE).contains(&low)
}

/// Builds one packet per case and checks what the parser reports.
fn check_ops(transport: Transport, cases: impl IntoIterator<Item = (u8, Roce, Seen)>) {
    let mut n = 0;
    for (opcode, r, mut want) in cases {
        want.transport = transport;
        let frame = Frame::v4().build(&r.data(48).icrc());
        let p = parse_ok(&frame.bytes);
        assert_eq!(p.bth, bth(opcode, QP, 0x12_3456), "opcode {opcode:#04x}");
        assert_eq!(seen(&p), want, "opcode {opcode:#04x}");
        n += 1;
    }
    assert!(n > 0);
}

#[test]
fn rc_every_operation() {
    check_ops(
        Transport::Rc,
        RC_OPS.map(|low| {
            let (r, s) = with_op_headers(low, Roce::bth(low, QP, 0x12_3456));
            (low, r, s)
        }),
    );
}

#[test]
fn operations_a_transport_does_not_define_are_other() {
    // IBTA 9.2: UC has SEND and WRITE only, RD has no send-with-invalidate, UD has SEND only.
    let reserved = (0x2C..=0x3F)
        .chain(0x55..=0x5F)
        .chain((0x60..=0x7F).filter(|o| *o != 0x64 && *o != 0x65));
    for opcode in reserved {
        let p = parse_ok(
            &Frame::v4()
                .build(&Roce::bth(opcode, QP, 7).data(48).icrc())
                .bytes,
        );
        assert_eq!(p.op_class(), OpClass::Other, "opcode {opcode:#04x}");
        // Reserved opcodes never feed PSN continuity.
        let mut s = FlowStats::default();
        s.record(&p, 1);
        s.record(&p, 2);
        assert_eq!(s.psn_regressions + s.psn_gaps, 0, "opcode {opcode:#04x}");
    }
    // The defined ones of the same transports still classify.
    for (opcode, class) in [
        (0x2B, OpClass::Write),
        (0x24, OpClass::Send),
        (0x54, OpClass::Atomic),
        (0x64, OpClass::Send),
    ] {
        let p = parse_ok(
            &Frame::v4()
                .build(&Roce::bth(opcode, QP, 7).data(48).icrc())
                .bytes,
        );
        assert_eq!(p.op_class(), class, "opcode {opcode:#04x}");
    }
}

#[test]
fn uc_every_operation() {
    // UC: SEND and RDMA WRITE only, no extra transport header.
    check_ops(
        Transport::Uc,
        (0x00..=0x0B).map(|low| {
            let (r, s) = with_op_headers(low, Roce::bth(0x20 | low, QP, 0x12_3456));
            (0x20 | low, r, s)
        }),
    );
}

#[test]
fn ud_send_carries_deth() {
    // UD: SEND only (0x64) and SEND only with immediate (0x65); DETH right after the BTH.
    check_ops(
        Transport::Ud,
        [op::SEND_ONLY, op::SEND_ONLY_IMM].map(|low| {
            let r = Roce::bth(0x60 | low, QP, 0x12_3456).deth(QKEY, SRC_QP);
            let (r, mut s) = with_op_headers(low, r);
            s.deth = Some((QKEY, SRC_QP));
            (0x60 | low, r, s)
        }),
    );
}

#[test]
fn rd_requests_carry_rdeth_and_deth() {
    // RD requests: BTH, RDETH, DETH, then RETH / ImmDt / AtomicETH.
    check_ops(
        Transport::Rd,
        (0x00..=0x14).filter(|&low| !is_response(low)).map(|low| {
            let r = Roce::bth(0x40 | low, QP, 0x12_3456)
                .rdeth()
                .deth(QKEY, SRC_QP);
            let (r, mut s) = with_op_headers(low, r);
            s.deth = Some((QKEY, SRC_QP));
            (0x40 | low, r, s)
        }),
    );
}

#[test]
fn rd_responses_carry_rdeth_but_no_deth() {
    // RD responses (READ response, ACKNOWLEDGE, ATOMIC ACKNOWLEDGE): BTH, RDETH, then AETH
    // (IBTA 9.2 / rxe_opcode.c: IB_OPCODE_RD_ACKNOWLEDGE = BTH + RDETH + AETH). No DETH.
    check_ops(
        Transport::Rd,
        (0x00..=0x14).filter(|&low| is_response(low)).map(|low| {
            let r = Roce::bth(0x40 | low, QP, 0x12_3456).rdeth();
            let (r, s) = with_op_headers(low, r);
            (0x40 | low, r, s)
        }),
    );
}

#[test]
fn rd_nak_is_classified_from_the_aeth_after_the_rdeth() {
    let r = Roce::bth(0x51, QP, 7).rdeth().aeth(Aeth {
        syndrome: 0x60,
        msn: 0x1234,
    });
    let p = parse_ok(&Frame::v4().build(&r.data(32).icrc()).bytes);
    assert_eq!(
        p.aeth,
        Some(Aeth {
            syndrome: 0x60,
            msn: 0x1234
        })
    );
    assert_eq!(p.op_class(), OpClass::Nak);
    assert_eq!((p.deth_qkey, p.deth_src_qp), (None, None));
}

#[test]
fn xrc_requests_carry_xrceth_responses_do_not() {
    let ops = RC_OPS.iter().copied();
    check_ops(
        Transport::Xrc,
        ops.map(|low| {
            let opcode = 0xA0 | low;
            let r = Roce::bth(opcode, QP, 0x12_3456);
            let r = if is_response(low) { r } else { r.xrceth() };
            let (r, s) = with_op_headers(low, r);
            (opcode, r, s)
        }),
    );
}

#[test]
fn read_request_reth_dma_length() {
    let r = Roce::bth(op::READ_REQUEST, QP, 9).reth(65536).icrc();
    let p = parse_ok(&Frame::v4().build(&r).bytes);
    assert_eq!(p.reth_dma_len(), Some(65536));
    assert_eq!(p.op_class(), OpClass::ReadRequest);
    // A READ request carries no payload: UDP = 8 + BTH 12 + RETH 16 + ICRC 4.
    assert_eq!(p.udp_len, 40);
    assert_eq!(p.ip_len, 60);
}

fn ack_class(syndrome: u8) -> (OpClass, Option<Aeth>) {
    let a = Aeth {
        syndrome,
        msn: 0x00_765432,
    };
    let r = Roce::bth(op::ACKNOWLEDGE, QP, 5).aeth(a).icrc();
    let p = parse_ok(&Frame::v4().build(&r).bytes);
    (p.op_class(), p.aeth)
}

#[test]
fn ack_nak_rnr_nak_by_syndrome() {
    for syndrome in 0x00..=0x1F {
        let a = Aeth {
            syndrome,
            msn: 0x00_765432,
        };
        assert_eq!(
            ack_class(syndrome),
            (OpClass::Ack, Some(a)),
            "{syndrome:#x}"
        );
    }
    for syndrome in 0x20..=0x3F {
        assert_eq!(ack_class(syndrome).0, OpClass::RnrNak, "{syndrome:#x}");
    }
    for syndrome in 0x60..=0x64 {
        assert_eq!(ack_class(syndrome).0, OpClass::Nak, "{syndrome:#x}");
    }
    // Reserved syndrome classes 010 and 1xx.
    for syndrome in [0x40, 0x5F, 0x80, 0xA0, 0xFF] {
        assert_eq!(ack_class(syndrome).0, OpClass::Other, "{syndrome:#x}");
    }
}

#[test]
fn ack_cut_before_its_aeth_is_still_an_ack() {
    let r = Roce::bth(op::ACKNOWLEDGE, QP, 5).aeth(Aeth {
        syndrome: 0x60,
        msn: 1,
    });
    let f = Frame::v4().build(&r.icrc());
    let p = parse_ok(f.cut(f.bth_end() + 3));
    assert_eq!((p.op_class(), p.aeth), (OpClass::Ack, None));
}

#[test]
fn atomics_and_atomic_ack() {
    for opcode in [op::COMPARE_SWAP, op::FETCH_ADD] {
        let p = parse_ok(
            &Frame::v4()
                .build(&Roce::bth(opcode, QP, 1).atomic_eth().icrc())
                .bytes,
        );
        assert_eq!(
            (p.op_class(), p.reth_dma_len(), p.aeth),
            (OpClass::Atomic, None, None)
        );
    }
    let a = Aeth {
        syndrome: 0x03,
        msn: 0x00_000101,
    };
    let r = Roce::bth(op::ATOMIC_ACKNOWLEDGE, QP, 1)
        .aeth(a)
        .atomic_ack_eth();
    let p = parse_ok(&Frame::v4().build(&r.icrc()).bytes);
    assert_eq!((p.op_class(), p.aeth), (OpClass::AtomicAck, Some(a)));
}

#[test]
fn cnp_with_becn() {
    let mut b = [0u8; 12];
    b[0] = 0x81;
    b[2..4].copy_from_slice(&[0xFF, 0xFF]);
    b[4] = 0x40; // BECN
    b[5..8].copy_from_slice(&[0x00, 0x12, 0x34]);
    let r = Roce::raw_bth(b).push(&[0; 16]).icrc();
    assert_eq!(r.len(), 32);
    let p = parse_ok(&Frame::v4().tos(48 << 2).build(&r).bytes);
    assert_eq!(
        p.bth,
        Bth {
            opcode: 0x81,
            pkey: 0xFFFF,
            becn: true,
            dest_qp: 0x1234,
            ..Bth::default()
        }
    );
    assert_eq!(p.op_class(), OpClass::Cnp);
    assert_eq!(p.bth.transport(), Transport::Cnp);
    assert_eq!((p.reth_dma_len(), p.aeth, p.deth_qkey), (None, None, None));
    assert_eq!((p.udp_len, p.ip_len), (40, 60));
    assert_eq!((p.dscp(), p.ecn()), (48, 0));
}

#[test]
fn reserved_and_vendor_opcodes_are_other() {
    let reserved_rc = [0x15, 0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F];
    let cnp_range = (0x80..=0x9F).filter(|&o| o != 0x81);
    let vendor = 0xC0..=0xFF;
    for opcode in reserved_rc.into_iter().chain(cnp_range).chain(vendor) {
        // Bytes after the BTH that would read as a RETH/AETH/DETH if the parser looked.
        let r = Roce::bth(opcode, QP, 3).data(64).icrc();
        let p = parse_ok(&Frame::v4().build(&r).bytes);
        assert_eq!(p.op_class(), OpClass::Other, "{opcode:#04x}");
        if opcode >= 0x80 {
            assert_eq!(
                (p.reth_dma_len(), p.aeth, p.deth_qkey, p.deth_src_qp),
                (None, None, None, None),
                "{opcode:#04x}"
            );
        }
    }
    assert_eq!(
        parse_ok(&Frame::v4().build(&Roce::bth(0xC0, 1, 1).icrc()).bytes)
            .bth
            .transport(),
        Transport::Vendor
    );
    assert_eq!(
        parse_ok(&Frame::v4().build(&Roce::bth(0x9F, 1, 1).icrc()).bytes)
            .bth
            .transport(),
        Transport::Cnp
    );
}

// ---------------------------------------------------------------------------------------------
// BTH fields
// ---------------------------------------------------------------------------------------------

#[test]
fn every_bth_field() {
    let all_set = [
        0x0A, // RC WRITE only
        0xB5, // SE, not MigReq, PadCnt 3, TVer 5
        0x12, 0x34, // P_Key
        0xC0, // FECN, BECN
        0xAB, 0xCD, 0xEF, // dest QP
        0xFF, // AckReq + reserved
        0xFE, 0xDC, 0xBA, // PSN
    ];
    let r = Roce::raw_bth(all_set).reth(4).data(4).icrc();
    let p = parse_ok(&Frame::v4().build(&r).bytes);
    assert_eq!(
        p.bth,
        Bth {
            opcode: 0x0A,
            solicited: true,
            mig_req: false,
            pad_count: 3,
            tver: 5,
            pkey: 0x1234,
            fecn: true,
            becn: true,
            dest_qp: 0x00AB_CDEF,
            ack_req: true,
            psn: 0x00FE_DCBA,
        }
    );

    let complement = [
        0x04, // RC SEND only
        0x4A, // MigReq, PadCnt 0, TVer 10
        0x80, 0x01, // P_Key (full membership bit)
        0x3F, // reserved bits only
        0x00, 0x00, 0x01, // dest QP 1
        0x7F, // reserved bits only
        0x80, 0x00, 0x00, // PSN 2^23
    ];
    let p = parse_ok(&Frame::v4().build(&Roce::raw_bth(complement).icrc()).bytes);
    assert_eq!(
        p.bth,
        Bth {
            opcode: 0x04,
            solicited: false,
            mig_req: true,
            pad_count: 0,
            tver: 10,
            pkey: 0x8001,
            fecn: false,
            becn: false,
            dest_qp: 1,
            ack_req: false,
            psn: 0x0080_0000,
        }
    );

    for pad in 0..4u8 {
        let mut b = complement;
        b[1] = pad << 4;
        let p = parse_ok(&Frame::v4().build(&Roce::raw_bth(b).icrc()).bytes);
        assert_eq!(
            (p.bth.pad_count, p.bth.mig_req, p.bth.tver),
            (pad, false, 0)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Encapsulation
// ---------------------------------------------------------------------------------------------

fn send_only() -> Vec<u8> {
    Roce::bth(op::SEND_ONLY, QP, 77).data(20).icrc()
}

#[test]
fn untagged_ipv4_fields() {
    let p = parse_ok(&Frame::v4().build(&send_only()).bytes);
    assert_eq!(p.vlan_count, 0);
    assert_eq!(p.vlans, [VlanTag::default(); 2]);
    assert!(!p.is_ipv6);
    assert_eq!(p.src_ip, v4_mapped(SRC4));
    assert_eq!(p.dst_ip, v4_mapped(DST4));
    assert_eq!(
        p.src_ip,
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 198, 18, 0, 1]
    );
    assert_eq!((p.tos, p.dscp(), p.ecn()), (TOS, 26, 2));
    assert_eq!(p.udp_src_port, SPORT);
    assert_eq!(p.udp_len, 8 + 12 + 20 + 4);
    assert_eq!(p.ip_len, 20 + 8 + 12 + 20 + 4);
    assert_eq!(p.bth, bth(op::SEND_ONLY, QP, 77));
}

#[test]
fn single_vlan() {
    let p = parse_ok(
        &Frame::v4()
            .vlan(0x8100, 3, true, 0xABC)
            .build(&send_only())
            .bytes,
    );
    assert_eq!(p.vlan_count, 1);
    assert_eq!(
        p.vlans,
        [
            VlanTag {
                tpid: 0x8100,
                pcp: 3,
                dei: true,
                vid: 0xABC
            },
            VlanTag::default()
        ]
    );
    assert_eq!(p.bth, bth(op::SEND_ONLY, QP, 77));
}

#[test]
fn qinq() {
    let p = parse_ok(
        &Frame::v4()
            .vlan(0x88A8, 5, false, 100)
            .vlan(0x8100, 7, true, 4095)
            .build(&send_only())
            .bytes,
    );
    assert_eq!(p.vlan_count, 2);
    assert_eq!(
        p.vlans,
        [
            VlanTag {
                tpid: 0x88A8,
                pcp: 5,
                dei: false,
                vid: 100
            },
            VlanTag {
                tpid: 0x8100,
                pcp: 7,
                dei: true,
                vid: 4095
            }
        ]
    );
    assert_eq!(p.src_ip, v4_mapped(SRC4));
    assert_eq!(p.bth, bth(op::SEND_ONLY, QP, 77));
}

#[test]
fn three_vlan_tags() {
    let f = Frame::v4()
        .vlan(0x88A8, 1, false, 1)
        .vlan(0x8100, 2, false, 2)
        .vlan(0x8100, 3, false, 3)
        .build(&send_only());
    assert_eq!(parse(&f.bytes[..]), Err(SkipReason::TooManyVlanTags));
}

#[test]
fn ipv6_traffic_class_and_addresses() {
    // The traffic class straddles bytes 0 and 1: check both nibbles and every DSCP/ECN pair shape.
    for (tc, dscp, ecn) in [
        (0x6B, 26, 3),
        (0xC1, 48, 1),
        (0x02, 0, 2),
        (0xFC, 63, 0),
        (0xFF, 63, 3),
    ] {
        let f = Frame::v6()
            .tos(tc)
            .vlan(0x8100, 3, false, 10)
            .build(&send_only());
        let p = parse_ok(&f.bytes);
        assert!(p.is_ipv6);
        assert_eq!((p.tos, p.dscp(), p.ecn()), (tc, dscp, ecn), "tc {tc:#x}");
        assert_eq!(p.src_ip, SRC6);
        assert_eq!(p.dst_ip, DST6);
        assert_eq!(p.ip_len, 40 + 8 + 12 + 20 + 4);
        assert_eq!(p.udp_len, 8 + 12 + 20 + 4);
        assert_eq!(p.bth, bth(op::SEND_ONLY, QP, 77));
    }
    // The flow label's top nibble shares byte 1 with the traffic class.
    let mut f = Frame::v6().tos(0x00).build(&send_only());
    f.set_u8(f.ip + 1, 0x0F);
    assert_eq!(parse_ok(&f.bytes).tos, 0);
}

#[test]
fn ipv4_options_every_ihl() {
    for words in 0..=10 {
        let f = Frame::v4().options(words).build(&send_only());
        assert_eq!(f.bytes[f.ip] & 0x0F, 5 + words as u8);
        let p = parse_ok(&f.bytes);
        assert_eq!(p.bth, bth(op::SEND_ONLY, QP, 77), "IHL {}", 5 + words);
        assert_eq!(p.ip_len as usize, 20 + 4 * words + 8 + 36);
        assert_eq!(p.udp_len, 44);
        assert_eq!(p.src_ip, v4_mapped(SRC4));
        assert_eq!(p.dst_ip, v4_mapped(DST4));
    }
}

#[test]
fn ip_len_comes_from_the_ip_header_not_the_capture() {
    let r = Roce::bth(op::WRITE_ONLY, QP, 1)
        .reth(1024)
        .data(1024)
        .icrc();
    for frame in [Frame::v4(), Frame::v6(), Frame::v4().options(3)] {
        let f = frame.build(&r);
        let hl = f.l4 - f.ip;
        let full = parse_ok(&f.bytes);
        assert_eq!(full.ip_len as usize, hl + 8 + 12 + 16 + 1024 + 4);
        for cut in [f.bth_end(), f.bth_end() + 16, f.bytes.len() - 100] {
            let p = parse_ok(f.cut(cut));
            assert_eq!(p.ip_len, full.ip_len);
            assert_eq!(p.udp_len as usize, 8 + 12 + 16 + 1024 + 4);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Skip reasons
// ---------------------------------------------------------------------------------------------

#[test]
fn not_ip() {
    let arp = raw_frame(&[], 0x0806, &[0, 1, 8, 0, 6, 4, 0, 1]);
    let lldp = raw_frame(&[], 0x88CC, &[0x02, 0x07, 0x04]);
    let tagged_arp = raw_frame(&[(0x8100, tci(3, false, 5))], 0x0806, &[0; 28]);
    for f in [arp, lldp, tagged_arp] {
        assert_eq!(parse(&f[..]), Err(SkipReason::NotIp));
    }
}

#[test]
fn pause_and_pfc_frames() {
    // PFC: priorities 3 and 4 enabled; priority 5's time is set but not enabled.
    let mut pfc_body = vec![0x01, 0x01, 0x00, 0x18];
    for q in [0u16, 0, 0, 0xFFFF, 0x0100, 0x7777, 0, 0] {
        pfc_body.extend(q.to_be_bytes());
    }
    let pfc = raw_frame(&[], 0x8808, &pfc_body);
    let parsed = parse_frame(&pfc[..]);
    assert_eq!(parsed.result, Err(SkipReason::MacControl));
    let p = &parsed.pause(&pfc[..]).expect("a PFC frame");
    assert!(p.is_pfc());
    assert_eq!(p.src_mac, pfc[6..12]);
    assert_eq!(p.class_enable, 0x18);
    assert_eq!(p.quanta, [0, 0, 0, 0xFFFF, 0x0100, 0x7777, 0, 0]);
    let mut s = PauseStats::default();
    s.record(p, 5);
    assert_eq!(s.pfc_frames, 1);
    assert_eq!(s.frames, [0, 0, 0, 1, 1, 0, 0, 0, 0]);
    assert_eq!(s.quanta[3..6], [0xFFFF, 0x0100, 0]);

    // 802.3x PAUSE, and its XON.
    for (q, xon) in [(0x0200u16, 0), (0, 1)] {
        let mut body = vec![0x00, 0x01];
        body.extend(q.to_be_bytes());
        let f = raw_frame(&[], 0x8808, &body);
        let parsed = parse_frame(&f[..]);
        let p = &parsed.pause(&f[..]).expect("a PAUSE frame");
        assert!(!p.is_pfc());
        let mut s = PauseStats::default();
        s.record(p, 5);
        assert_eq!(
            (s.pfc_frames, s.frames[LINK_PAUSE], s.xon[LINK_PAUSE]),
            (0, 1, xon)
        );
        assert_eq!(s.quanta[LINK_PAUSE], u64::from(q));
    }

    // Another MAC control opcode: counted as mac_control, no pause.
    let gate = raw_frame(&[], 0x8808, &[0x00, 0x02, 0, 0, 0, 0]);
    let parsed = parse_frame(&gate[..]);
    assert_eq!(parsed.result, Err(SkipReason::MacControl));
    assert_eq!(parsed.pause(&gate[..]), None);
    // MAC control is never tagged: a tagged one is not_ip. Cut inside its times: truncated.
    let tagged = raw_frame(&[(0x8100, tci(3, false, 5))], 0x8808, &pfc_body);
    assert_eq!(parse_frame(&tagged[..]).result, Err(SkipReason::NotIp));
    assert_eq!(parse_frame(&tagged[..]).pause(&tagged[..]), None);
    let cut = parse_frame(&pfc[..30]);
    assert_eq!(cut.result, Err(SkipReason::Truncated));
    assert_eq!(cut.pause(&pfc[..30]), None);
    // An 802.3x PAUSE needs its 6 bytes, not the padding (seen before a NIC pads it).
    let mut pause = raw_frame(&[], 0x8808, &[0x00, 0x01, 0x12, 0x34]);
    pause.truncate(14 + 4);
    assert_eq!(parse_frame(&pause[..]).result, Err(SkipReason::MacControl));
    assert_eq!(
        parse_frame(&pause[..]).pause(&pause[..]).unwrap().quanta[0],
        0x1234
    );
    assert_eq!(parse_frame(&pause[..17]).result, Err(SkipReason::Truncated));
}

#[test]
fn not_udp() {
    for f in [
        Frame::v4().proto(6),
        Frame::v6().proto(6),
        Frame::v4().proto(1),
        Frame::v6().proto(0), // hop-by-hop options: not followed
    ] {
        assert_eq!(
            parse(&f.build(&send_only()).bytes[..]),
            Err(SkipReason::NotUdp),
            "{f:?}"
        );
    }
}

#[test]
fn other_port() {
    for (sport, dport) in [
        (SPORT, 4789),
        (SPORT, 4790),
        (SPORT, 4792),
        (4791, 50000),
        (0, 0),
    ] {
        let f = Frame::v4().ports(sport, dport).build(&send_only());
        assert_eq!(parse(&f.bytes[..]), Err(SkipReason::OtherPort));
    }
    let f = Frame::v6().ports(SPORT, 443).build(&send_only());
    assert_eq!(parse(&f.bytes[..]), Err(SkipReason::OtherPort));
}

#[test]
fn ip_fragments() {
    for frag in [0x2000, 0x6000, 0x0001, 0x1FFF, 0x2001, 0x4001] {
        let f = Frame::v4().frag(frag).build(&send_only());
        assert_eq!(
            parse(&f.bytes[..]),
            Err(SkipReason::IpFragment),
            "{frag:#x}"
        );
    }
    // DF alone and no flags at all are not fragments; the reserved bit is no fragment either.
    for frag in [0x4000, 0x0000, 0x8000] {
        let f = Frame::v4().frag(frag).build(&send_only());
        assert!(parse(&f.bytes[..]).is_ok(), "{frag:#x}");
    }
    let f = Frame::v6().proto(44).build(&send_only());
    assert_eq!(parse(&f.bytes[..]), Err(SkipReason::IpFragment));
}

#[test]
fn truncated() {
    let f = Frame::v4().build(&send_only());
    for cut in [
        0,
        1,
        13,
        14,
        33,
        f.ip + 20,
        f.l4 + 7,
        f.l4 + 8,
        f.bth_end() - 1,
    ] {
        assert_eq!(parse(f.cut(cut)), Err(SkipReason::Truncated), "cut {cut}");
    }
    assert!(parse(f.cut(f.bth_end())).is_ok());
}

#[test]
fn bad_header_length() {
    use SkipReason::BadHeaderLength;
    // IHL below 5.
    for ihl in 0..5u8 {
        let mut f = Frame::v4().build(&send_only());
        f.set_u8(f.ip, 0x40 | ihl);
        assert_eq!(parse(&f.bytes[..]), Err(BadHeaderLength), "IHL {ihl}");
    }
    // IPv4 total length below IHL * 4 + UDP + BTH.
    for words in [0, 10] {
        let f = Frame::v4().options(words).build(&send_only());
        let min = (20 + 4 * words + 8 + 12) as u16;
        for (total, ok) in [(0, false), (20, false), (min - 1, false), (min, true)] {
            let mut g = f.clone();
            g.set_u16(g.ip + 2, total);
            match parse(&g.bytes[..]) {
                Ok(p) => {
                    assert!(ok, "total {total} accepted");
                    assert_eq!(p.ip_len, u32::from(total));
                }
                Err(e) => {
                    assert!(!ok, "total {total}: {e:?}");
                    assert_eq!(e, BadHeaderLength);
                }
            }
        }
    }
    // IPv6 payload length below UDP + BTH.
    for (payload, want) in [
        (0, Err(BadHeaderLength)),
        (19, Err(BadHeaderLength)),
        (20, Ok(60)),
    ] {
        let mut f = Frame::v6().build(&send_only());
        f.set_u16(f.ip + 4, payload);
        assert_eq!(parse(&f.bytes[..]).map(|p| p.ip_len), want, "{payload}");
    }
    // UDP length below UDP + BTH.
    for frame in [Frame::v4(), Frame::v6()] {
        for (len, want) in [
            (0, Err(BadHeaderLength)),
            (8, Err(BadHeaderLength)),
            (19, Err(BadHeaderLength)),
            (20, Ok(20)),
        ] {
            let mut f = frame.build(&send_only());
            f.set_u16(f.l4 + 4, len);
            assert_eq!(parse(&f.bytes[..]).map(|p| p.udp_len), want, "{len}");
        }
    }
}

#[test]
fn bad_ip_version() {
    for first in [0x65, 0x05, 0xF5, 0x45 + 0x10] {
        let mut f = Frame::v4().build(&send_only());
        f.set_u8(f.ip, first);
        assert_eq!(
            parse(&f.bytes[..]),
            Err(SkipReason::BadIpVersion),
            "{first:#x}"
        );
    }
    for first in [0x46, 0x06, 0x76] {
        let mut f = Frame::v6().build(&send_only());
        f.set_u8(f.ip, first);
        assert_eq!(
            parse(&f.bytes[..]),
            Err(SkipReason::BadIpVersion),
            "{first:#x}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Truncation sweeps
// ---------------------------------------------------------------------------------------------

/// Where each optional header of a frame ends (exclusive offset into the frame).
#[derive(Clone, Copy, Default)]
struct Ends {
    reth: Option<usize>,
    aeth: Option<usize>,
    deth: Option<usize>,
}

fn sweep(name: &str, f: &Built, ends: Ends) {
    let full = parse_ok(&f.bytes);
    assert_eq!(full.reth_dma_len().is_some(), ends.reth.is_some(), "{name}");
    assert_eq!(full.aeth.is_some(), ends.aeth.is_some(), "{name}");
    assert_eq!(full.deth_qkey.is_some(), ends.deth.is_some(), "{name}");
    for cut in 0..=f.bytes.len() {
        let got = parse(f.cut(cut));
        if cut < f.bth_end() {
            assert_eq!(got, Err(SkipReason::Truncated), "{name}: cut at {cut}");
            continue;
        }
        let present = |end: Option<usize>| end.is_some_and(|e| cut >= e);
        let mut want = full;
        if !present(ends.reth) {
            want.set_reth(None);
        }
        if !present(ends.aeth) {
            want.aeth = None;
            want.aeth_syndrome = observer_common::parse::NO_AETH;
        }
        if !present(ends.deth) {
            want.deth_qkey = None;
            want.deth_src_qp = None;
        }
        assert_eq!(got, Ok(want), "{name}: cut at {cut}");
    }
}

#[test]
fn truncation_sweep_valid_frames() {
    let write = Frame::v4().build(
        &Roce::bth(op::WRITE_FIRST, QP, 10)
            .reth(4096)
            .data(64)
            .icrc(),
    );
    let reth = Some(write.bth_end() + 16);
    sweep(
        "RC WRITE first",
        &write,
        Ends {
            reth,
            ..Ends::default()
        },
    );

    let a = Aeth {
        syndrome: 0x1F,
        msn: 3,
    };
    let ack = Frame::v4()
        .vlan(0x8100, 3, false, 42)
        .build(&Roce::bth(op::ACKNOWLEDGE, QP, 10).aeth(a).icrc());
    let aeth = Some(ack.bth_end() + 4);
    sweep(
        "RC ACK",
        &ack,
        Ends {
            aeth,
            ..Ends::default()
        },
    );

    let ud = Frame::v4().build(&Roce::bth(0x64, QP, 10).deth(QKEY, SRC_QP).data(256).icrc());
    let deth = Some(ud.bth_end() + 8);
    sweep(
        "UD send",
        &ud,
        Ends {
            deth,
            ..Ends::default()
        },
    );

    let v6 = Frame::v6()
        .vlan(0x88A8, 1, true, 7)
        .vlan(0x8100, 3, false, 8)
        .build(&Roce::bth(op::READ_REQUEST, QP, 10).reth(1 << 20).icrc());
    let reth = Some(v6.bth_end() + 16);
    sweep(
        "IPv6 QinQ READ request",
        &v6,
        Ends {
            reth,
            ..Ends::default()
        },
    );

    let opts = Frame::v4().options(7).build(
        &Roce::bth(op::READ_RESPONSE_FIRST, QP, 10)
            .aeth(a)
            .data(100)
            .icrc(),
    );
    let aeth = Some(opts.bth_end() + 4);
    sweep(
        "IPv4 IHL 12 READ response first",
        &opts,
        Ends {
            aeth,
            ..Ends::default()
        },
    );

    let xrc = Frame::v4().build(
        &Roce::bth(0xA0 | op::WRITE_FIRST, QP, 10)
            .xrceth()
            .reth(300)
            .data(8)
            .icrc(),
    );
    let reth = Some(xrc.bth_end() + 4 + 16);
    sweep(
        "XRC WRITE first",
        &xrc,
        Ends {
            reth,
            ..Ends::default()
        },
    );
}

/// Frames the parser rejects: cut anywhere, they are `Truncated` until the header holding the
/// deciding field is complete (the parser reads a header at a time), then the reason.
#[test]
fn truncation_sweep_rejected_frames() {
    let body = send_only();
    let three_tags = raw_frame(
        &[(0x88A8, 1), (0x8100, 2), (0x8100, 3)],
        0x0800,
        &[0x45; 40],
    );
    let tagged_arp = raw_frame(&[(0x8100, 9)], 0x0806, &[0; 28]);
    let mut cases: Vec<(&str, Vec<u8>, usize, SkipReason)> = vec![
        (
            "ARP",
            raw_frame(&[], 0x0806, &[0; 28]),
            14,
            SkipReason::NotIp,
        ),
        ("tagged ARP", tagged_arp, 18, SkipReason::NotIp),
        ("three tags", three_tags, 22, SkipReason::TooManyVlanTags),
    ];
    let v4 = Frame::v4().build(&body);
    let v6 = Frame::v6().build(&body);
    let with = |f: &Built, edit: &dyn Fn(&mut Built)| {
        let mut g = f.clone();
        edit(&mut g);
        g.bytes
    };
    // The version nibble and the IHL are judged once the first two bytes are there (the
    // parser reads two: a one-byte load at a variable offset defeats the BPF verifier).
    cases.push((
        "IHL 4",
        with(&v4, &|g| g.set_u8(g.ip, 0x44)),
        v4.ip + 2,
        SkipReason::BadHeaderLength,
    ));
    cases.push((
        "IPv4 version 6",
        with(&v4, &|g| g.set_u8(g.ip, 0x65)),
        v4.ip + 2,
        SkipReason::BadIpVersion,
    ));
    // Fragment bits, protocol and total length once the 20-byte fixed header is complete.
    cases.push((
        "IPv4 MF",
        Frame::v4().frag(0x2000).build(&body).bytes,
        v4.ip + 20,
        SkipReason::IpFragment,
    ));
    cases.push((
        "IPv4 TCP",
        Frame::v4().proto(6).build(&body).bytes,
        v4.ip + 20,
        SkipReason::NotUdp,
    ));
    cases.push((
        "IPv4 total length 39",
        with(&v4, &|g| g.set_u16(g.ip + 2, 39)),
        v4.ip + 20,
        SkipReason::BadHeaderLength,
    ));
    // IPv6: version, payload length and next header are in the first 8 bytes.
    cases.push((
        "IPv6 version 4",
        with(&v6, &|g| g.set_u8(g.ip, 0x46)),
        v6.ip + 8,
        SkipReason::BadIpVersion,
    ));
    cases.push((
        "IPv6 fragment header",
        Frame::v6().proto(44).build(&body).bytes,
        v6.ip + 8,
        SkipReason::IpFragment,
    ));
    cases.push((
        "IPv6 TCP",
        Frame::v6().proto(6).build(&body).bytes,
        v6.ip + 8,
        SkipReason::NotUdp,
    ));
    // UDP: port and length once the 8-byte header is complete.
    cases.push((
        "other port",
        Frame::v4().ports(1, 2).build(&body).bytes,
        v4.l4 + 8,
        SkipReason::OtherPort,
    ));
    cases.push((
        "UDP length 19",
        with(&v6, &|g| g.set_u16(g.l4 + 4, 19)),
        v6.l4 + 8,
        SkipReason::BadHeaderLength,
    ));
    for (name, bytes, decided_at, reason) in cases {
        assert_eq!(parse(&bytes[..]), Err(reason), "{name}");
        for cut in 0..=bytes.len() {
            let want = if cut < decided_at {
                SkipReason::Truncated
            } else {
                reason
            };
            assert_eq!(parse(&bytes[..cut]), Err(want), "{name}: cut at {cut}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Flow accounting
// ---------------------------------------------------------------------------------------------

fn pkt(opcode: u8, psn: u32) -> RocePacket {
    RocePacket {
        src_ip: v4_mapped(SRC4),
        dst_ip: v4_mapped(DST4),
        ip_len: 1000,
        tos: TOS,
        udp_src_port: SPORT,
        udp_len: 980,
        bth: bth(opcode, QP, psn),
        aeth_syndrome: observer_common::parse::NO_AETH,
        ..RocePacket::default()
    }
}

fn send(psn: u32) -> RocePacket {
    pkt(op::SEND_ONLY, psn)
}

fn read(psn: u32, len: Option<u32>) -> RocePacket {
    let mut p = pkt(op::READ_REQUEST, psn);
    p.set_reth(len);
    p
}

fn ack(opcode: u8, psn: u32, syndrome: u8) -> RocePacket {
    RocePacket {
        aeth: Some(Aeth { syndrome, msn: 0 }),
        aeth_syndrome: u16::from(syndrome),
        ..pkt(opcode, psn)
    }
}

fn replay(pkts: &[RocePacket]) -> FlowStats {
    let mut s = FlowStats::default();
    for (i, p) in pkts.iter().enumerate() {
        s.record(p, 1_000 + i as u64);
    }
    s
}

/// (gaps, missing, regressions); holes still open at the end are missing.
fn psn(s: &FlowStats) -> (u64, u64, u64) {
    (s.psn_gaps, s.timeless().seq.lost, s.psn_regressions)
}

fn sends(psns: &[u32]) -> Vec<RocePacket> {
    psns.iter().map(|&p| send(p)).collect()
}

#[test]
fn psn_in_sequence() {
    let s = replay(&sends(&(100..110).collect::<Vec<_>>()));
    assert_eq!(psn(&s), (0, 0, 0));
    let t = s.seq_track;
    assert_eq!(
        (t.flags & seq::F_VALID, t.next_lo, t.next_hi),
        (1, 110, 110)
    );
    assert_eq!(s.ops[OpClass::Send as usize], 10);
}

#[test]
fn psn_gap() {
    assert_eq!(psn(&replay(&sends(&[0, 1, 2, 6]))), (1, 3, 0));
    assert_eq!(psn(&replay(&sends(&[0, 1, 2, 6, 7, 8]))), (1, 3, 0));
    assert_eq!(psn(&replay(&sends(&[0, 2, 4]))), (2, 2, 0));
    // Writes and atomics are requests too.
    let mixed = [
        pkt(op::WRITE_FIRST, 0),
        pkt(op::WRITE_MIDDLE, 1),
        pkt(op::WRITE_LAST, 5),
        pkt(op::FETCH_ADD, 6),
        pkt(op::COMPARE_SWAP, 9),
    ];
    assert_eq!(psn(&replay(&mixed)), (2, 5, 0));
}

#[test]
fn psn_duplicate_and_backwards() {
    assert_eq!(psn(&replay(&sends(&[0, 1, 1]))), (0, 0, 1));
    assert_eq!(psn(&replay(&sends(&[0, 1, 2, 3, 1]))), (0, 0, 1));
    // A run of PSNs sent before is a go-back-N: both are retransmissions, and the expected
    // PSN stays after the newest.
    let s = replay(&sends(&[0, 1, 2, 3, 1, 2]));
    assert_eq!(psn(&s), (0, 0, 2));
    assert_eq!((s.seq.duplicates, s.seq.retransmissions), (0, 2));
    assert_eq!(s.seq_track.next_lo, 4);
}

#[test]
fn psn_go_back_n() {
    // 3 and 4 lost before the observer, then resent with 5: nothing missing in the end.
    let s = replay(&sends(&[0, 1, 2, 5, 3, 4, 5, 6]));
    assert_eq!(psn(&s), (1, 0, 3));
    assert_eq!((s.seq.retransmissions, s.seq.retx_episodes), (3, 1));
}

#[test]
fn psn_read_consumes_a_range() {
    const P: u32 = 1_000;
    let after_read = |next: u32| psn(&replay(&[read(P, Some(65536)), send(P + next)]));
    // 65536 bytes: 16 PSNs at PMTU 4096 .. 256 PSNs at PMTU 256.
    for next in [16, 17, 64, 255, 256] {
        assert_eq!(after_read(next), (0, 0, 0), "+{next}");
    }
    assert_eq!(after_read(257), (1, 1, 0));
    assert_eq!(after_read(300), (1, 44, 0));
    // Inside the 16 PSNs the READ consumes under any path MTU: a violation, not a regression.
    assert_eq!(after_read(15), (0, 0, 0));
    let s = replay(&[read(P, Some(65536)), send(P + 15)]);
    assert_eq!(s.seq.violations, [1; 5]);
    assert_eq!(after_read(0), (0, 0, 1));
    let s = replay(&[read(P, Some(65536))]);
    let t = s.seq_track;
    assert_eq!((t.next_lo, t.next_hi), (P + 16, P + 256));

    // Short READs consume one PSN, zero-length too.
    for len in [0, 1, 256] {
        assert_eq!(
            psn(&replay(&[read(P, Some(len)), send(P + 1)])),
            (0, 0, 0),
            "len {len}"
        );
        assert_eq!(
            psn(&replay(&[read(P, Some(len)), send(P + 2)])),
            (1, 1, 0),
            "len {len}"
        );
    }
    // 4097 bytes: 2 (PMTU 4096) .. 17 (PMTU 256).
    let s = replay(&[read(P, Some(4097))]);
    let t = s.seq_track;
    assert_eq!((t.next_lo, t.next_hi), (P + 2, P + 17));

    // A READ cut before its RETH accepts anything up to 2^23 - 1 ahead.
    assert_eq!(psn(&replay(&[read(P, None), send(P + 1)])), (0, 0, 0));
    assert_eq!(
        psn(&replay(&[read(P, None), send(P + 1_000_000)])),
        (0, 0, 0)
    );
    assert_eq!(psn(&replay(&[read(P, None), send(P)])), (0, 0, 1));
}

#[test]
fn psn_wraps_at_2_pow_24() {
    assert_eq!(
        psn(&replay(&sends(&[0xFF_FFFD, 0xFF_FFFE, 0xFF_FFFF, 0, 1]))),
        (0, 0, 0)
    );
    assert_eq!(psn(&replay(&sends(&[0xFF_FFFE, 0xFF_FFFF, 2]))), (1, 2, 0));
    assert_eq!(psn(&replay(&sends(&[1, 2, 0xFF_FFFF]))), (0, 0, 1));
    // Modulo 2^24: a jump of 2^20 or more either way is no sender's: a new incarnation.
    assert_eq!(psn(&replay(&sends(&[0, 1 << 23]))), (0, 0, 0));
    assert_eq!(replay(&sends(&[0, 1 << 23])).seq.resets, 1);
    assert_eq!(psn(&replay(&sends(&[0, (1 << 23) + 1]))), (0, 0, 0));
    assert_eq!(psn(&replay(&sends(&[0, 1000]))), (1, 999, 0));
    // A READ whose PSN range crosses the wrap.
    let r = read(0xFF_FFF8, Some(65536));
    let s = replay(&[r]);
    let t = s.seq_track;
    assert_eq!((t.next_lo, t.next_hi), (8, 248));
    assert_eq!(psn(&replay(&[r, send(8)])), (0, 0, 0));
    assert_eq!(psn(&replay(&[r, send(248)])), (0, 0, 0));
    assert_eq!(psn(&replay(&[r, send(249)])), (1, 1, 0));
    // 7 is the READ's 16th PSN: inside its range under any path MTU.
    assert_eq!(psn(&replay(&[r, send(7)])), (0, 0, 0));
    assert_eq!(replay(&[r, send(7)]).seq.violations, [1; 5]);
}

#[test]
fn psn_of_responses_is_never_counted() {
    let s = replay(&[
        send(0),
        ack(op::ACKNOWLEDGE, 0, 0x1F),
        send(1),
        ack(op::ACKNOWLEDGE, 900, 0x1F),
        ack(op::ACKNOWLEDGE, 5, 0x60),
        ack(op::ACKNOWLEDGE, 3, 0x21),
        ack(op::READ_RESPONSE_FIRST, 77, 0),
        pkt(op::READ_RESPONSE_MIDDLE, 50),
        ack(op::READ_RESPONSE_LAST, 2, 0),
        ack(op::ATOMIC_ACKNOWLEDGE, 1, 0),
        pkt(0x81, 0),
        send(2),
    ]);
    assert_eq!(psn(&s), (0, 0, 0));
    assert_eq!(s.seq_track.next_lo, 3);
    // The NAK with the sequence error code; the newest response PSN.
    assert_eq!((s.seq.nak_seq, s.seq_track.resp_psn), (1, 900));
    let ops = |c: OpClass| s.ops[c as usize];
    assert_eq!(
        [
            ops(OpClass::Send),
            ops(OpClass::Ack),
            ops(OpClass::Nak),
            ops(OpClass::RnrNak),
            ops(OpClass::ReadResponse),
            ops(OpClass::AtomicAck),
            ops(OpClass::Cnp),
        ],
        [3, 2, 1, 1, 3, 1, 1]
    );
    // Only responses: no PSN state at all.
    let s = replay(&[ack(op::ACKNOWLEDGE, 10, 0), ack(op::ACKNOWLEDGE, 5, 0)]);
    assert_eq!((psn(&s), s.seq_track.flags & seq::F_VALID), ((0, 0, 0), 0));
}

#[test]
fn psn_ud_is_never_counted_uc_and_xrc_are() {
    let ud: Vec<_> = [0, 10, 5, 5].iter().map(|&p| pkt(0x64, p)).collect();
    let s = replay(&ud);
    assert_eq!((psn(&s), s.seq_track.flags), ((0, 0, 0), 0));
    assert_eq!(s.ops[OpClass::Send as usize], 4);

    // 4 opens a hole of two, 2 arrives late, 3 never does.
    let uc: Vec<_> = [0, 1, 4, 2].iter().map(|&p| pkt(0x24, p)).collect();
    assert_eq!(psn(&replay(&uc)), (1, 1, 1));
    let xrc: Vec<_> = [0, 1, 4, 2].iter().map(|&p| pkt(0xA4, p)).collect();
    assert_eq!(psn(&replay(&xrc)), (1, 1, 1));
}

#[test]
fn flow_stats_record() {
    let ce = RocePacket {
        tos: (26 << 2) | 3,
        ip_len: 64,
        ..send(1)
    };
    let not_ect = RocePacket {
        tos: 0,
        ip_len: 100,
        ..send(2)
    };
    let cnp = RocePacket {
        tos: 48 << 2 | 1,
        ip_len: 60,
        ..pkt(0x81, 0)
    };
    let mut s = FlowStats::default();
    s.record(&send(0), 500);
    s.record(&ce, 700);
    s.record(&not_ect, 600); // out of order timestamp
    s.record(&cnp, 800);
    assert_eq!(s.packets, 4);
    assert_eq!(s.bytes, 1000 + 64 + 100 + 60);
    assert_eq!(s.ecn, [1, 1, 1, 1]);
    assert_eq!(s.dscp_mask, (1 << 26) | (1 << 48) | 1);
    assert_eq!((s.first_seen_ns, s.last_seen_ns), (500, 800));
    assert_eq!(s.ops[OpClass::Send as usize], 3);
    assert_eq!(s.ops[OpClass::Cnp as usize], 1);
    assert_eq!(s.ops.iter().sum::<u64>(), 4);
}

#[test]
fn flow_stats_merge() {
    let mut a = FlowStats::default();
    a.record(&send(0), 500);
    a.record(&send(1), 600);
    let mut b = FlowStats::default();
    b.record(
        &RocePacket {
            tos: 48 << 2 | 3,
            ..send(10)
        },
        100,
    );
    b.record(&send(12), 900);

    let mut m = a;
    m.merge(&b);
    assert_eq!(m.packets, 4);
    assert_eq!(m.bytes, 4000);
    assert_eq!(m.ecn, [0, 0, 3, 1]);
    assert_eq!(m.ops[OpClass::Send as usize], 4);
    assert_eq!(psn(&m), (1, 1, 0));
    assert_eq!((m.first_seen_ns, m.last_seen_ns), (100, 900));
    assert_eq!(m.dscp_mask, (1 << 26) | (1 << 48));
    // The continuation state follows the most recent view (b, last seen at 900).
    let t = m.seq_track;
    assert_eq!((t.next_lo, t.next_hi, t.flags & seq::F_VALID), (13, 13, 1));

    let mut r = b;
    r.merge(&a);
    assert_eq!(
        (r.packets, r.first_seen_ns, r.last_seen_ns, r.dscp_mask),
        (4, 100, 900, m.dscp_mask)
    );
    assert_eq!((r.seq_track.next_lo, psn(&r)), (13, (1, 1, 0)));

    // Merging into or from an empty view.
    let mut e = FlowStats::default();
    e.merge(&a);
    assert_eq!(e, a);
    let mut c = a;
    c.merge(&FlowStats::default());
    assert_eq!(c, a);
}

#[test]
fn counters_record_and_merge() {
    let ce = RocePacket {
        tos: 3,
        ip_len: 100,
        ..send(0)
    };
    let cnp = RocePacket {
        ip_len: 60,
        ..pkt(0x81, 0)
    };
    let mut c = Counters::default();
    for r in [
        Ok(ce),
        Ok(cnp),
        Ok(send(1)),
        Err(SkipReason::NotIp),
        Err(SkipReason::Truncated),
        Err(SkipReason::Truncated),
    ] {
        c.record(&r);
    }
    let mut skipped = [0; SkipReason::COUNT];
    skipped[0] = 1; // not_ip
    skipped[4] = 2; // truncated
    assert_eq!(
        c,
        Counters {
            frames: 6,
            roce_packets: 3,
            roce_bytes: 1160,
            ce_packets: 1,
            cnp_packets: 1,
            flow_insert_failures: 0,
            skipped,
            ..Counters::default()
        }
    );

    // Every reason lands in its own slot, in declaration order.
    let mut d = Counters::default();
    for (i, reason) in SkipReason::ALL.iter().enumerate() {
        for _ in 0..=i {
            d.record(&Err(*reason));
        }
    }
    assert_eq!(d.skipped, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    assert_eq!((d.frames, d.roce_packets), (66, 0));

    let mut m = c;
    m.merge(&d);
    assert_eq!(m.frames, 72);
    assert_eq!(m.skipped, [2, 2, 3, 4, 7, 6, 7, 8, 9, 10, 11]);
    assert_eq!((m.roce_packets, m.roce_bytes, m.ce_packets), (3, 1160, 1));
}

#[test]
fn flow_key_of_a_parsed_packet() {
    let f = Frame::v6().ports(0xC123, ROCE_PORT).build(&send_only());
    let k = FlowKey::of(&parse_ok(&f.bytes));
    assert_eq!(
        k,
        FlowKey {
            src_ip: SRC6,
            dst_ip: DST6,
            dest_qp: QP,
            udp_src_port: 0xC123,
            mirror: 0,
        }
    );
}
