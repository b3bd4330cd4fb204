//! Property test with etherparse as an independent oracle: random frames built by etherparse's
//! `PacketBuilder`, randomly truncated, sliced by `LaxSlicedPacket` and by the observer's parser;
//! both must agree on every field they both decode.

use std::cell::RefCell;
use std::collections::BTreeMap;

use etherparse::{
    DoubleVlanHeader, EtherType, IpDscp, IpEcn, IpHeaders, Ipv4Header, Ipv4Options, Ipv6FlowLabel,
    Ipv6Header, LaxLinkExtSlice, LaxNetSlice, LaxSlicedPacket, LinkSlice, PacketBuilder,
    SingleVlanHeader, TransportSlice, VlanHeader, VlanId, VlanPcp, ip_number,
};
use observer_common::{RocePacket, SkipReason, VlanTag, parse};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};

#[derive(Clone, Copy, Debug)]
struct Tag {
    pcp: u8,
    dei: bool,
    vid: u16,
}

impl Tag {
    fn header(self) -> SingleVlanHeader {
        SingleVlanHeader {
            pcp: VlanPcp::try_new(self.pcp).unwrap(),
            drop_eligible_indicator: self.dei,
            vlan_id: VlanId::try_new(self.vid).unwrap(),
            ether_type: EtherType(0), // set by the builder
        }
    }
}

#[derive(Clone, Debug)]
enum Ip {
    V4 {
        dscp: u8,
        ecn: u8,
        src: [u8; 4],
        dst: [u8; 4],
        ttl: u8,
        options: Vec<u8>,
    },
    V6 {
        traffic_class: u8,
        flow_label: u32,
        src: [u8; 16],
        dst: [u8; 16],
        hop_limit: u8,
    },
}

#[derive(Clone, Debug)]
struct Case {
    vlans: Vec<Tag>,
    ip: Ip,
    sport: u16,
    dport: u16,
    /// UDP payload; its first 12 bytes are the BTH.
    payload: Vec<u8>,
    /// Where a mirror cut the copy, if it did.
    cut: Option<Index>,
}

fn tag() -> impl Strategy<Value = Tag> {
    (0u8..8, any::<bool>(), 0u16..4096).prop_map(|(pcp, dei, vid)| Tag { pcp, dei, vid })
}

fn ip() -> impl Strategy<Value = Ip> {
    let v4 = (
        0u8..64,
        0u8..4,
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u8>(),
        (0usize..=10).prop_flat_map(|words| prop::collection::vec(any::<u8>(), words * 4)),
    )
        .prop_map(|(dscp, ecn, src, dst, ttl, options)| Ip::V4 {
            dscp,
            ecn,
            src,
            dst,
            ttl,
            options,
        });
    let v6 = (
        any::<u8>(),
        0u32..(1 << 20),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        any::<u8>(),
    )
        .prop_map(|(traffic_class, flow_label, src, dst, hop_limit)| Ip::V6 {
            traffic_class,
            flow_label,
            src,
            dst,
            hop_limit,
        });
    prop_oneof![v4, v6]
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(tag(), 0..=2),
        ip(),
        any::<u16>(),
        prop_oneof![4 => Just(4791u16), 1 => any::<u16>()],
        prop::collection::vec(any::<u8>(), 12..=200),
        prop_oneof![Just(None), any::<Index>().prop_map(Some)],
    )
        .prop_map(|(vlans, ip, sport, dport, payload, cut)| Case {
            vlans,
            ip,
            sport,
            dport,
            payload,
            cut,
        })
}

fn build(c: &Case) -> Vec<u8> {
    let ip = match &c.ip {
        Ip::V4 {
            dscp,
            ecn,
            src,
            dst,
            ttl,
            options,
        } => {
            let mut h = Ipv4Header::new(0, *ttl, ip_number::UDP, *src, *dst).unwrap();
            h.dscp = IpDscp::try_new(*dscp).unwrap();
            h.ecn = IpEcn::try_new(*ecn).unwrap();
            h.options = Ipv4Options::try_from(&options[..]).unwrap();
            IpHeaders::Ipv4(h, Default::default())
        }
        Ip::V6 {
            traffic_class,
            flow_label,
            src,
            dst,
            hop_limit,
        } => IpHeaders::Ipv6(
            Ipv6Header {
                traffic_class: *traffic_class,
                flow_label: Ipv6FlowLabel::try_new(*flow_label).unwrap(),
                payload_length: 0, // set by the builder
                next_header: ip_number::UDP,
                hop_limit: *hop_limit,
                source: *src,
                destination: *dst,
            },
            Default::default(),
        ),
    };
    let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let builder = match c.vlans[..] {
        [] => eth.ip(ip),
        [t] => eth.vlan(VlanHeader::Single(t.header())).ip(ip),
        [outer, inner] => eth
            .vlan(VlanHeader::Double(DoubleVlanHeader {
                outer: outer.header(),
                inner: inner.header(),
            }))
            .ip(ip),
        _ => unreachable!(),
    }
    .udp(c.sport, c.dport);
    let mut bytes = Vec::with_capacity(builder.size(c.payload.len()));
    builder.write(&mut bytes, &c.payload).unwrap();
    if let Some(cut) = c.cut {
        bytes.truncate(cut.index(bytes.len() + 1));
    }
    bytes
}

/// What etherparse sees, in the parser's terms.
#[derive(Debug, PartialEq, Eq)]
struct View {
    is_ipv6: bool,
    src_ip: [u8; 16],
    dst_ip: [u8; 16],
    ip_len: u32,
    dscp: u8,
    ecn: u8,
    vlans: Vec<VlanTag>,
    udp_src_port: u16,
    udp_len: u16,
    opcode: u8,
    pkey: u16,
    dest_qp: u32,
    psn: u32,
}

fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[10] = 0xFF;
    m[11] = 0xFF;
    m[12..].copy_from_slice(&a);
    m
}

fn oracle(frame: &[u8]) -> Result<View, SkipReason> {
    use SkipReason::{OtherPort, Truncated};
    let lax = LaxSlicedPacket::from_ethernet(frame).map_err(|_| Truncated)?;
    let Some(LinkSlice::Ethernet2(eth)) = &lax.link else {
        panic!("no Ethernet II header: {lax:?}");
    };
    // A tag's TPID is the EtherType in front of it.
    let mut tpid = eth.ether_type().0;
    let mut vlans = Vec::new();
    for ext in &lax.link_exts {
        let LaxLinkExtSlice::Vlan(v) = ext else {
            panic!("unexpected link extension {ext:?}");
        };
        vlans.push(VlanTag {
            tpid,
            pcp: v.priority_code_point().value(),
            dei: v.drop_eligible_indicator(),
            vid: v.vlan_identifier().value(),
        });
        tpid = v.ether_type().0;
    }
    let (is_ipv6, src_ip, dst_ip, ip_len, dscp, ecn) = match &lax.net {
        None => return Err(Truncated),
        Some(LaxNetSlice::Ipv4(v4)) => {
            let h = v4.header();
            (
                false,
                v4_mapped(h.source()),
                v4_mapped(h.destination()),
                u32::from(h.total_len()),
                h.dcp().value(),
                h.ecn().value(),
            )
        }
        Some(LaxNetSlice::Ipv6(v6)) => {
            let h = v6.header();
            (
                true,
                h.source(),
                h.destination(),
                40 + u32::from(h.payload_length()),
                h.dscp().value(),
                h.ecn().value(),
            )
        }
        Some(LaxNetSlice::Arp(_)) => panic!("ARP"),
    };
    let udp = match &lax.transport {
        None => return Err(Truncated),
        Some(TransportSlice::Udp(udp)) => udp,
        Some(t) => panic!("not UDP: {t:?}"),
    };
    if udp.destination_port() != 4791 {
        return Err(OtherPort);
    }
    let bth = udp.payload();
    if bth.len() < 12 {
        return Err(Truncated);
    }
    Ok(View {
        is_ipv6,
        src_ip,
        dst_ip,
        ip_len,
        dscp,
        ecn,
        vlans,
        udp_src_port: udp.source_port(),
        udp_len: udp.length(),
        opcode: bth[0],
        pkey: u16::from_be_bytes([bth[2], bth[3]]),
        dest_qp: u32::from_be_bytes([0, bth[5], bth[6], bth[7]]),
        psn: u32::from_be_bytes([0, bth[9], bth[10], bth[11]]),
    })
}

fn ours(p: &RocePacket) -> View {
    let n = usize::from(p.vlan_count);
    assert!(n <= 2);
    assert!(p.vlans[n..].iter().all(|v| *v == VlanTag::default()));
    View {
        is_ipv6: p.is_ipv6,
        src_ip: p.src_ip,
        dst_ip: p.dst_ip,
        ip_len: p.ip_len,
        dscp: p.dscp(),
        ecn: p.ecn(),
        vlans: p.vlans[..n].to_vec(),
        udp_src_port: p.udp_src_port,
        udp_len: p.udp_len,
        opcode: p.bth.opcode,
        pkey: p.bth.pkey,
        dest_qp: p.bth.dest_qp,
        psn: p.bth.psn,
    }
}

#[test]
fn parser_agrees_with_etherparse() {
    let mut runner = TestRunner::new(Config {
        cases: 4000,
        failure_persistence: None,
        ..Config::default()
    });
    // How often each outcome came up, so the property cannot pass vacuously.
    let seen = RefCell::new(BTreeMap::<String, u32>::new());
    let result = runner.run(&case(), |c| {
        let frame = build(&c);
        let want = oracle(&frame);
        let got = parse(&frame[..]).map(|p| ours(&p));
        prop_assert_eq!(&got, &want, "frame {:02x?}", frame);
        let outcome = match &want {
            Ok(v) => format!("ok ipv6={} vlans={}", v.is_ipv6, v.vlans.len()),
            Err(e) => format!("{e:?}"),
        };
        *seen.borrow_mut().entry(outcome).or_default() += 1;
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let seen = seen.into_inner();
    println!("{seen:#?}");
    for outcome in [
        "ok ipv6=false vlans=0",
        "ok ipv6=false vlans=1",
        "ok ipv6=false vlans=2",
        "ok ipv6=true vlans=0",
        "ok ipv6=true vlans=1",
        "ok ipv6=true vlans=2",
        "Truncated",
        "OtherPort",
    ] {
        assert!(
            seen.get(outcome).copied().unwrap_or(0) >= 20,
            "{outcome} too rare: {seen:?}"
        );
    }
}
