//! Noise: frames the observer must skip, each with the [`SkipReason`] it must count it under
//! ([`basic_noise`] for the e2e set, [`extra_noise`] for the corpus) and mirror copies it must skip
//! ([`mirror_noise`]).

use observer_common::SkipReason;
use observer_common::wire::{self, op};

use super::DATA_DSCP;
use super::encap::{Encap, encapsulate, mac_control_frame, pfc_frame, quanta_at};
use super::frame::{
    Ip, RoceFrame, host_mac, len16, put_ipv4, put_ipv6, put16, put32, refresh_ipv4_checksum, tag,
    v4, v6,
};

/// The RoCE frame the noise frames are derived from (untagged IPv4 RC SEND only, 32 bytes).
fn noise_base() -> RoceFrame {
    let mut f = RoceFrame::new(
        Ip::v4(v4(3, 1), v4(3, 2)),
        wire::TRANSPORT_RC | op::SEND_ONLY,
        0x300,
    );
    f.src_mac = host_mac(0x301);
    f.dst_mac = host_mac(0x302);
    f.payload_len = 32;
    f
}

/// Ethernet header plus an IPv4 header with `payload`.
fn ipv4_packet(proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&host_mac(0x302));
    b.extend_from_slice(&host_mac(0x301));
    put16(&mut b, wire::ETHERTYPE_IPV4);
    let total = len16(wire::IPV4_MIN_HEADER_LEN + payload.len());
    put_ipv4(&mut b, 20, DATA_DSCP << 2, total, proto, v4(3, 1), v4(3, 2));
    b.extend_from_slice(payload);
    b
}

/// Ethernet header plus an IPv6 header with next header `next` and `payload`.
fn ipv6_packet(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&host_mac(0x302));
    b.extend_from_slice(&host_mac(0x301));
    put16(&mut b, wire::ETHERTYPE_IPV6);
    put_ipv6(
        &mut b,
        0,
        0,
        len16(payload.len()),
        next,
        v6(0x301),
        v6(0x302),
    );
    b.extend_from_slice(payload);
    b
}

fn udp_datagram(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    put16(&mut b, sport);
    put16(&mut b, dport);
    put16(&mut b, len16(wire::UDP_HEADER_LEN + payload.len()));
    put16(&mut b, 0);
    b.extend_from_slice(payload);
    b
}

/// A minimal TCP SYN header towards `dport`.
fn tcp_syn(dport: u16) -> Vec<u8> {
    let mut b = Vec::new();
    put16(&mut b, 40_000);
    put16(&mut b, dport);
    put32(&mut b, 1);
    put32(&mut b, 0);
    b.extend_from_slice(&[0x50, 0x02, 0xFF, 0xFF, 0, 0, 0, 0]);
    b
}

/// Ethernet frame with `ethertype` and `payload`, padded to 60 bytes.
fn ether(dst: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&dst);
    b.extend_from_slice(&host_mac(0x301));
    put16(&mut b, ethertype);
    b.extend_from_slice(payload);
    b.resize(b.len().max(60), 0);
    b
}

fn arp_request() -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    p.extend_from_slice(&host_mac(0x301));
    p.extend_from_slice(&v4(3, 1).octets());
    p.extend_from_slice(&[0; 6]);
    p.extend_from_slice(&v4(3, 2).octets());
    ether([0xFF; 6], wire::ETHERTYPE_ARP, &p)
}

/// A RoCE frame whose IPv4 header bytes are changed by `edit` (checksum refreshed).
fn edited_ipv4(edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut b = noise_base().to_bytes();
    let ip = &mut b[wire::ETH_HEADER_LEN..];
    edit(ip);
    refresh_ipv4_checksum(ip);
    b
}

/// A RoCE datagram (UDP + BTH + payload + ICRC bytes) for hand-built IP packets.
fn roce_udp() -> Vec<u8> {
    let f = noise_base();
    f.to_bytes()[f.bth_offset() - wire::UDP_HEADER_LEN..].to_vec()
}

/// Frames the observer must skip, one per [`SkipReason`] (the e2e set), with their reasons.
pub fn basic_noise() -> Vec<(Vec<u8>, SkipReason)> {
    use SkipReason::*;
    let base = noise_base();
    let mut three_tags = base.clone();
    three_tags.vlans = vec![
        tag(wire::ETHERTYPE_QINQ, 10),
        tag(wire::ETHERTYPE_VLAN, 20),
        tag(wire::ETHERTYPE_VLAN, 30),
    ];
    let mut frag6 = vec![wire::IPPROTO_UDP, 0, 0x00, 0x01];
    frag6.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    frag6.extend_from_slice(&roce_udp());
    let cut = base.to_bytes()[..base.bth_end() - 5].to_vec();
    vec![
        (arp_request(), NotIp),
        // MAC control with an opcode other than PAUSE / PFC (0x0002, EPON GATE).
        (
            mac_control_frame(host_mac(0x303), 0x0002, &[0; 6]),
            MacControl,
        ),
        (ipv4_packet(wire::IPPROTO_TCP, &tcp_syn(4791)), NotUdp),
        (
            ipv4_packet(wire::IPPROTO_UDP, &udp_datagram(5353, 53, &[0; 17])),
            OtherPort,
        ),
        (edited_ipv4(|ip| ip[6] = 0x20), IpFragment),
        (ipv6_packet(wire::IPV6_NEXT_FRAGMENT, &frag6), IpFragment),
        (cut, Truncated),
        (edited_ipv4(|ip| ip[0] = 0x44), BadHeaderLength),
        (edited_ipv4(|ip| ip[0] = 0x65), BadIpVersion),
        (three_tags.to_bytes(), TooManyVlanTags),
        // GRE that is no mirror copy: IPv4 inside GRE.
        (
            ipv4_packet(wire::IPPROTO_GRE, &[0, 0, 0x08, 0x00, 0x45, 0, 0, 20]),
            GreUnsupported,
        ),
    ]
}

/// Mirror copies that are skipped: (frame, reason, ERSPAN session).
pub fn mirror_noise() -> Vec<(Vec<u8>, SkipReason, Option<u16>)> {
    let inner = noise_base().to_bytes();
    vec![
        (
            erspan3_not_ethernet(&inner),
            SkipReason::MirrorNotEthernet,
            Some(3),
        ),
        // ERSPAN II carrying ARP.
        (
            encapsulate(
                &arp_request(),
                Encap::ErspanII {
                    session: 5,
                    truncated: false,
                },
            ),
            SkipReason::NotIp,
            Some(5),
        ),
        // GRE TEB carrying TCP.
        (
            encapsulate(&ipv4_packet(wire::IPPROTO_TCP, &tcp_syn(4791)), Encap::Teb),
            SkipReason::NotUdp,
            None,
        ),
    ]
}

/// An ERSPAN III copy whose frame type says IP, not Ethernet.
fn erspan3_not_ethernet(inner: &[u8]) -> Vec<u8> {
    let mut b = encapsulate(
        inner,
        Encap::ErspanIII {
            session: 3,
            truncated: false,
            platform: false,
        },
    );
    // Outer Ethernet 14 + IPv4 20 + GRE with sequence 8: the ERSPAN III word with the frame
    // type is at bytes 10..12 of its header.
    let at = 14 + 20 + 8 + 10;
    let w = u16::from_be_bytes([b[at], b[at + 1]]) | (2 << 10);
    b[at..at + 2].copy_from_slice(&w.to_be_bytes());
    b
}

/// More skip cases for the corpus: other non-IP EtherTypes, IPv6 variants, bad lengths, ...
pub fn extra_noise() -> Vec<(Vec<u8>, SkipReason)> {
    use SkipReason::*;
    let base = noise_base();
    // A tagged PFC frame (MAC control is never tagged: not_ip) and one cut in its times.
    let mut tagged_pfc = pfc_frame(host_mac(0x302), 0x08, quanta_at(3, 0xFFFF));
    tagged_pfc.splice(12..12, [0x81, 0x00, 0x60, 0x64]);
    let cut_pfc = pfc_frame(host_mac(0x302), 0x08, quanta_at(3, 0xFFFF))[..30].to_vec();
    let mut tagged_arp = arp_request();
    tagged_arp.splice(12..12, [0x81, 0x00, 0x60, 0x64]);
    let mut four_tags = base.clone();
    four_tags.vlans = (0..4).map(|i| tag(wire::ETHERTYPE_VLAN, 40 + i)).collect();
    let mut v6_as_v4 = ipv6_packet(wire::IPPROTO_UDP, &roce_udp());
    v6_as_v4[14] = 0x45;
    let mut short_udp = roce_udp();
    short_udp[4..6].copy_from_slice(&19u16.to_be_bytes());
    let mut vlan = base.clone();
    vlan.vlans = vec![tag(wire::ETHERTYPE_VLAN, 7)];
    vec![
        (tagged_pfc, NotIp),
        (cut_pfc, Truncated),
        (
            ether([0x01, 0x80, 0xC2, 0, 0, 0x0E], 0x88CC, &[0; 46]),
            NotIp,
        ),
        (tagged_arp, NotIp),
        (ipv6_packet(wire::IPPROTO_TCP, &tcp_syn(4791)), NotUdp),
        (
            ipv4_packet(wire::IPPROTO_UDP, &udp_datagram(4791, 4792, &roce_udp())),
            OtherPort,
        ),
        (
            ipv6_packet(wire::IPPROTO_UDP, &udp_datagram(4791, 53, &[0; 20])),
            OtherPort,
        ),
        (
            edited_ipv4(|ip| ip[6..8].copy_from_slice(&185u16.to_be_bytes())),
            IpFragment,
        ),
        (v6_as_v4, BadIpVersion),
        (edited_ipv4(|ip| ip[0] = 0x40), BadHeaderLength),
        (
            edited_ipv4(|ip| ip[2..4].copy_from_slice(&39u16.to_be_bytes())),
            BadHeaderLength,
        ),
        (ipv4_packet(wire::IPPROTO_UDP, &short_udp), BadHeaderLength),
        (
            ipv6_packet(wire::IPPROTO_UDP, &roce_udp()[..19]),
            BadHeaderLength,
        ),
        (four_tags.to_bytes(), TooManyVlanTags),
        (Vec::new(), Truncated),
        (vlan.to_bytes()[..16].to_vec(), Truncated),
    ]
}
