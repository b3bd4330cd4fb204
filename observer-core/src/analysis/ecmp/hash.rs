//! Switch hash models: the fields a switch hashes (5-tuple, 5-tuple + destination QP, IP pair),
//! the hash functions it may use (CRC32, CRC32C, CRC16-CCITT, XOR fold, Toeplitz), a seed, and how
//! the hash picks one of N uplinks (modulo, or the upper bits). Checked against the published
//! test vectors (CRC check values, the RSS specification's Toeplitz verification suite).

use std::net::IpAddr;

/// The hash function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashFn {
    /// CRC-32 (IEEE 802.3, reflected, polynomial 0x04C11DB7).
    Crc32,
    /// CRC-32C (Castagnoli, reflected, polynomial 0x1EDC6F41).
    Crc32c,
    /// CRC-16-CCITT (polynomial 0x1021, initial 0xFFFF, not reflected: "CCITT-FALSE").
    Crc16Ccitt,
    /// The input's 32-bit big-endian words XORed together.
    XorFold,
    /// Toeplitz (Microsoft RSS) with the model's key.
    Toeplitz,
}

impl HashFn {
    /// Bits of the hash value (16 for CRC-16, else 32).
    pub const fn width(self) -> u32 {
        match self {
            Self::Crc16Ccitt => 16,
            _ => 32,
        }
    }
}

/// The header fields hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fields {
    /// Source and destination IP, protocol (UDP), source and destination port.
    FiveTuple,
    /// The 5-tuple and the BTH destination QP (switches with RoCE-aware "enhanced ECMP").
    FiveTupleQp,
    /// Source and destination IP only.
    IpPair,
}

/// How a hash value picks one of N members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bucket {
    /// hash mod N.
    Modulo,
    /// The upper bits: (hash x N) >> width, which for N a power of two is the top log2(N) bits.
    UpperBits,
}

impl crate::units::Named for HashFn {
    const ALL: &'static [Self] = &[
        Self::Crc32,
        Self::Crc32c,
        Self::Crc16Ccitt,
        Self::XorFold,
        Self::Toeplitz,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Crc32 => "crc32",
            Self::Crc32c => "crc32c",
            Self::Crc16Ccitt => "crc16-ccitt",
            Self::XorFold => "xor-fold",
            Self::Toeplitz => "toeplitz",
        }
    }
}

impl crate::units::Named for Fields {
    const ALL: &'static [Self] = &[Self::FiveTuple, Self::FiveTupleQp, Self::IpPair];

    fn name(self) -> &'static str {
        match self {
            Self::FiveTuple => "5tuple",
            Self::FiveTupleQp => "5tuple+qp",
            Self::IpPair => "ip",
        }
    }
}

impl crate::units::Named for Bucket {
    const ALL: &'static [Self] = &[Self::Modulo, Self::UpperBits];

    fn name(self) -> &'static str {
        match self {
            Self::Modulo => "modulo",
            Self::UpperBits => "upper-bits",
        }
    }
}

/// The RSS specification's example key (40 bytes), the default of `--hash toeplitz`.
pub const MICROSOFT_RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// What a switch hashes of one packet of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowFields {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    /// IP protocol (17 for RoCEv2).
    pub protocol: u8,
    /// BTH destination QP (24 bits).
    pub dest_qp: u32,
}

/// One hash stage: fields, function, seed (and key for Toeplitz), bucket selection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashModel {
    pub fields: Fields,
    pub func: HashFn,
    /// Mixed into the hash: the CRCs' initial value is XORed with it, XOR fold and Toeplitz
    /// XOR their result with it. All these functions are linear, so for inputs of one length a
    /// seed XORs every hash with one constant: it permutes 2^k members and cannot undo
    /// polarization on its own (another function or the other bits can).
    pub seed: u32,
    pub bucket: Bucket,
    /// Toeplitz only: the key (at least 4 bytes). An input longer than the key's bits less 32
    /// (an IPv6 5-tuple with the destination QP is 39 bytes, the RSS key 40) continues with the
    /// key from its start, as NICs with a short key repeat it.
    pub toeplitz_key: Vec<u8>,
}

impl HashModel {
    pub fn new(fields: Fields, func: HashFn, seed: u32, bucket: Bucket) -> Self {
        Self {
            fields,
            func,
            seed,
            bucket,
            toeplitz_key: MICROSOFT_RSS_KEY.to_vec(),
        }
    }

    /// The hash input: the fields in the order switches and RSS take them. Toeplitz follows the
    /// RSS specification (source IP, destination IP, source port, destination port: no
    /// protocol); the others take the classic 5-tuple order. The destination QP (24 bits) is
    /// appended for `5tuple+qp`.
    pub fn input(&self, f: &FlowFields) -> Vec<u8> {
        let mut b = Vec::with_capacity(44);
        let ip = |b: &mut Vec<u8>, a: IpAddr| match a {
            IpAddr::V4(v4) => b.extend_from_slice(&v4.octets()),
            IpAddr::V6(v6) => b.extend_from_slice(&v6.octets()),
        };
        ip(&mut b, f.src_ip);
        ip(&mut b, f.dst_ip);
        if self.fields == Fields::IpPair {
            return b;
        }
        if self.func != HashFn::Toeplitz {
            b.push(f.protocol);
        }
        b.extend_from_slice(&f.src_port.to_be_bytes());
        b.extend_from_slice(&f.dst_port.to_be_bytes());
        if self.fields == Fields::FiveTupleQp {
            b.extend_from_slice(&(f.dest_qp & 0x00FF_FFFF).to_be_bytes()[1..]);
        }
        b
    }

    /// The hash value of a flow.
    pub fn hash(&self, f: &FlowFields) -> u32 {
        self.hash_bytes(&self.input(f))
    }

    /// The hash value of an input.
    pub fn hash_bytes(&self, input: &[u8]) -> u32 {
        match self.func {
            HashFn::Crc32 => crc32_reflected(0xEDB8_8320, !self.seed, input) ^ 0xFFFF_FFFF,
            HashFn::Crc32c => crc32_reflected(0x82F6_3B78, !self.seed, input) ^ 0xFFFF_FFFF,
            HashFn::Crc16Ccitt => u32::from(crc16_ccitt(0xFFFF ^ self.seed as u16, input)),
            HashFn::XorFold => xor_fold(input) ^ self.seed,
            HashFn::Toeplitz => toeplitz(&self.toeplitz_key, input) ^ self.seed,
        }
    }

    /// The member (0..n) a hash value picks.
    pub fn select(&self, hash: u32, n: u32) -> u32 {
        let n = n.max(1);
        match self.bucket {
            Bucket::Modulo => hash % n,
            Bucket::UpperBits => ((u64::from(hash) * u64::from(n)) >> self.func.width()) as u32,
        }
    }

    /// The member (0..n) a flow goes to.
    pub fn member(&self, f: &FlowFields, n: u32) -> u32 {
        self.select(self.hash(f), n)
    }
}

/// A reflected CRC-32 with polynomial `poly` (reversed form) from `init`, no final XOR.
pub fn crc32_reflected(poly: u32, init: u32, data: &[u8]) -> u32 {
    let mut crc = init;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ poly
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// CRC-16-CCITT (polynomial 0x1021, MSB first) from `init`, no final XOR.
pub fn crc16_ccitt(init: u16, data: &[u8]) -> u16 {
    let mut crc = init;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The input's 32-bit big-endian words XORed together (the last one zero-padded).
pub fn xor_fold(data: &[u8]) -> u32 {
    data.chunks(4).fold(0, |acc, c| {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        acc ^ u32::from_be_bytes(w)
    })
}

/// The Toeplitz hash of `data` with `key`: for every set bit of the input, XOR in the 32 key
/// bits starting at that bit's position. The key repeats past its end (an empty key hashes to 0).
pub fn toeplitz(key: &[u8], data: &[u8]) -> u32 {
    if key.is_empty() {
        return 0;
    }
    let key_bit = |i: usize| -> u32 {
        let i = i % (key.len() * 8);
        u32::from(key[i / 8] >> (7 - (i % 8)) & 1)
    };
    let mut window: u32 = (0..32).fold(0, |w, i| (w << 1) | key_bit(i));
    let mut hash = 0;
    for (n, &byte) in data.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = (window << 1) | key_bit(n * 8 + bit + 32);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const CHECK: &[u8] = b"123456789";

    #[test]
    fn crc_check_values() {
        // The catalogued check values of the input "123456789".
        let m = |func| HashModel::new(Fields::FiveTuple, func, 0, Bucket::Modulo);
        assert_eq!(m(HashFn::Crc32).hash_bytes(CHECK), 0xCBF4_3926);
        assert_eq!(m(HashFn::Crc32c).hash_bytes(CHECK), 0xE306_9283);
        assert_eq!(m(HashFn::Crc16Ccitt).hash_bytes(CHECK), 0x29B1);
        assert_eq!(xor_fold(&[1, 2, 3, 4, 5]), 0x0102_0304 ^ 0x0500_0000);
        // A seed changes the value; seed 0 is the standard function.
        let seeded = HashModel::new(Fields::FiveTuple, HashFn::Crc32, 7, Bucket::Modulo);
        assert_ne!(seeded.hash_bytes(CHECK), 0xCBF4_3926);
    }

    /// One vector of the RSS verification suite: (source, destination, source port,
    /// destination port, hash of the IPs only, hash with the ports).
    type RssVector = ([u8; 4], [u8; 4], u16, u16, u32, u32);
    const RSS_V4: [RssVector; 5] = [
        (
            [66, 9, 149, 187],
            [161, 142, 100, 80],
            2794,
            1766,
            0x323e_8fc2,
            0x51cc_c178,
        ),
        (
            [199, 92, 111, 2],
            [65, 69, 140, 83],
            14230,
            4739,
            0xd718_262a,
            0xc626_b0ea,
        ),
        (
            [24, 19, 198, 95],
            [12, 22, 207, 184],
            12898,
            38024,
            0xd2d0_a5de,
            0x5c2b_394a,
        ),
        (
            [38, 27, 205, 30],
            [209, 142, 163, 6],
            48228,
            2217,
            0x8298_9176,
            0xafc7_327f,
        ),
        (
            [153, 39, 163, 191],
            [202, 188, 127, 2],
            44251,
            1303,
            0x5d18_09c5,
            0x10e8_28a2,
        ),
    ];

    #[test]
    fn toeplitz_matches_the_rss_verification_suite() {
        for (src, dst, sport, dport, ip_only, with_ports) in RSS_V4 {
            let f = FlowFields {
                src_ip: Ipv4Addr::from(src).into(),
                dst_ip: Ipv4Addr::from(dst).into(),
                src_port: sport,
                dst_port: dport,
                protocol: 6,
                dest_qp: 0,
            };
            let ports = HashModel::new(Fields::FiveTuple, HashFn::Toeplitz, 0, Bucket::Modulo);
            let ips = HashModel::new(Fields::IpPair, HashFn::Toeplitz, 0, Bucket::Modulo);
            assert_eq!(ports.hash(&f), with_ports, "{src:?}");
            assert_eq!(ips.hash(&f), ip_only, "{src:?}");
        }
        let f = FlowFields {
            src_ip: "3ffe:2501:200:1fff::7".parse::<Ipv6Addr>().unwrap().into(),
            dst_ip: "3ffe:2501:200:3::1".parse::<Ipv6Addr>().unwrap().into(),
            src_port: 2794,
            dst_port: 1766,
            protocol: 6,
            dest_qp: 0,
        };
        let ports = HashModel::new(Fields::FiveTuple, HashFn::Toeplitz, 0, Bucket::Modulo);
        let ips = HashModel::new(Fields::IpPair, HashFn::Toeplitz, 0, Bucket::Modulo);
        assert_eq!(ports.hash(&f), 0x4020_7d3d);
        assert_eq!(ips.hash(&f), 0x2cc1_8cd5);
        // IPv6 with the destination QP (39 bytes) goes past the 40-byte key's last full
        // window: the QP must still count.
        let qp = HashModel::new(Fields::FiveTupleQp, HashFn::Toeplitz, 0, Bucket::Modulo);
        let members: std::collections::BTreeSet<u32> = (0..64)
            .map(|q| qp.member(&FlowFields { dest_qp: q, ..f }, 8))
            .collect();
        assert!(members.len() > 4, "{members:?}");
    }

    #[test]
    fn fields_and_buckets() {
        let f = FlowFields {
            src_ip: Ipv4Addr::new(198, 18, 0, 1).into(),
            dst_ip: Ipv4Addr::new(198, 18, 0, 2).into(),
            src_port: 0xC001,
            dst_port: 4791,
            protocol: 17,
            dest_qp: 0x00AB_CDEF,
        };
        let m = |fields| HashModel::new(fields, HashFn::Crc32, 0, Bucket::Modulo);
        assert_eq!(m(Fields::IpPair).input(&f).len(), 8);
        assert_eq!(
            m(Fields::FiveTuple).input(&f),
            [198, 18, 0, 1, 198, 18, 0, 2, 17, 0xC0, 0x01, 0x12, 0xB7]
        );
        assert_eq!(m(Fields::FiveTupleQp).input(&f)[13..], [0xAB, 0xCD, 0xEF]);
        // The destination QP only matters when hashed.
        let other_qp = FlowFields { dest_qp: 1, ..f };
        assert_eq!(
            m(Fields::FiveTuple).hash(&f),
            m(Fields::FiveTuple).hash(&other_qp)
        );
        assert_ne!(
            m(Fields::FiveTupleQp).hash(&f),
            m(Fields::FiveTupleQp).hash(&other_qp)
        );
        // Modulo takes the low bits, upper bits the high ones.
        let modulo = HashModel::new(Fields::FiveTuple, HashFn::Crc32, 0, Bucket::Modulo);
        let upper = HashModel::new(Fields::FiveTuple, HashFn::Crc32, 0, Bucket::UpperBits);
        assert_eq!(modulo.select(0x8000_0003, 4), 3);
        assert_eq!(upper.select(0x8000_0003, 4), 2);
        assert_eq!(upper.select(0xFFFF_FFFF, 6), 5);
        let crc16 = HashModel::new(Fields::FiveTuple, HashFn::Crc16Ccitt, 0, Bucket::UpperBits);
        assert_eq!(crc16.select(0xC000, 4), 3);
    }
}
