//! Operations: the transport of an opcode, the class of what it does, and the table of the
//! IBTA's operation codes that every opcode decision reads.

use crate::wire::{self, op};

/// Transport service, from the top 3 bits of the opcode.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    Rc = 0,
    Uc = 1,
    Rd = 2,
    Ud = 3,
    /// 0x80-0x9F: the RoCEv2 CNP (0x81) and reserved codes.
    Cnp = 4,
    Xrc = 5,
    /// 0xC0-0xFF: manufacturer specific.
    Vendor = 6,
}

impl Transport {
    #[inline(always)]
    pub const fn of(opcode: u8) -> Self {
        match opcode >> 5 {
            0 => Self::Rc,
            1 => Self::Uc,
            2 => Self::Rd,
            3 => Self::Ud,
            4 => Self::Cnp,
            5 => Self::Xrc,
            _ => Self::Vendor,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::Rc => "RC",
            Self::Uc => "UC",
            Self::Rd => "RD",
            Self::Ud => "UD",
            Self::Cnp => "CNP",
            Self::Xrc => "XRC",
            Self::Vendor => "vendor",
        }
    }
}

/// What a packet does; the discriminant indexes [`crate::FlowStats::ops`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpClass {
    Send = 0,
    Write = 1,
    ReadRequest = 2,
    ReadResponse = 3,
    Ack = 4,
    Nak = 5,
    RnrNak = 6,
    Atomic = 7,
    AtomicAck = 8,
    Cnp = 9,
    Other = 10,
}

impl OpClass {
    pub const COUNT: usize = 11;
    pub const ALL: [OpClass; Self::COUNT] = [
        Self::Send,
        Self::Write,
        Self::ReadRequest,
        Self::ReadResponse,
        Self::Ack,
        Self::Nak,
        Self::RnrNak,
        Self::Atomic,
        Self::AtomicAck,
        Self::Cnp,
        Self::Other,
    ];

    /// The name used in reports (`flows[].ops`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Write => "write",
            Self::ReadRequest => "read_request",
            Self::ReadResponse => "read_response",
            Self::Ack => "ack",
            Self::Nak => "nak",
            Self::RnrNak => "rnr_nak",
            Self::Atomic => "atomic",
            Self::AtomicAck => "atomic_ack",
            Self::Cnp => "cnp",
            Self::Other => "other",
        }
    }

    /// Requests consume request PSNs in order; only these feed PSN continuity.
    #[inline(always)]
    pub const fn is_request(self) -> bool {
        matches!(
            self,
            Self::Send | Self::Write | Self::ReadRequest | Self::Atomic
        )
    }
}

/// `classify_raw`'s syndrome for "no AETH".
pub const NO_AETH: u16 = 0x100;

/// Classifies an opcode (with the AETH syndrome for ACKNOWLEDGE packets).
#[inline(always)]
pub fn classify(opcode: u8, aeth_syndrome: Option<u8>) -> OpClass {
    classify_raw(opcode, aeth_syndrome.map_or(NO_AETH, u16::from))
}

/// `classify` with the syndrome as a plain value ([`NO_AETH`] when absent).
#[inline(always)]
pub fn classify_raw(opcode: u8, aeth_syndrome: u16) -> OpClass {
    let aeth_syndrome = if aeth_syndrome == NO_AETH {
        None
    } else {
        Some(aeth_syndrome as u8)
    };
    if opcode == wire::OPCODE_CNP {
        return OpClass::Cnp;
    }
    let low = opcode & 0x1F;
    // Each transport defines a subset of the operations (IBTA 9.2); the rest are reserved.
    let defined = match Transport::of(opcode) {
        Transport::Rc | Transport::Xrc => true,
        Transport::Uc => low <= op::WRITE_ONLY_IMM,
        Transport::Rd => low <= op::FETCH_ADD,
        Transport::Ud => low == op::SEND_ONLY || low == op::SEND_ONLY_IMM,
        Transport::Cnp | Transport::Vendor => false,
    };
    if !defined {
        return OpClass::Other;
    }
    match low {
        op::SEND_FIRST..=op::SEND_ONLY_IMM | op::SEND_LAST_INV | op::SEND_ONLY_INV => OpClass::Send,
        op::WRITE_FIRST..=op::WRITE_ONLY_IMM => OpClass::Write,
        op::READ_REQUEST => OpClass::ReadRequest,
        op::READ_RESPONSE_FIRST..=op::READ_RESPONSE_ONLY => OpClass::ReadResponse,
        op::ACKNOWLEDGE => match aeth_syndrome.map(|s| s >> 5) {
            // An ACKNOWLEDGE cut before its AETH still is an acknowledgement.
            None | Some(wire::AETH_ACK) => OpClass::Ack,
            Some(wire::AETH_RNR_NAK) => OpClass::RnrNak,
            Some(wire::AETH_NAK) => OpClass::Nak,
            Some(_) => OpClass::Other,
        },
        op::ATOMIC_ACKNOWLEDGE => OpClass::AtomicAck,
        op::COMPARE_SWAP | op::FETCH_ADD => OpClass::Atomic,
        _ => OpClass::Other,
    }
}
