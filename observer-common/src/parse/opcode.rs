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

/// Where a packet sits in its message (a READ response's packets make one message too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    First,
    Middle,
    Last,
    Only,
}

/// The extended transport header that comes first after the BTH (and after the RDETH, DETH or
/// XRCETH a transport adds): the one the parser reads, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    None,
    /// RDMA ETH: virtual address, R_Key, DMA length (the parser reads the length).
    Reth,
    /// ACK ETH: syndrome and MSN (an ATOMIC ACKNOWLEDGE's AtomicAckETH follows it).
    Aeth,
    /// Atomic ETH: virtual address, R_Key, swap/add and compare data (not read).
    AtomicEth,
}

/// One operation of the IBTA's list: the low 5 bits of an opcode (the top 3 name the
/// transport, [`Transport::of`]).
#[derive(Clone, Copy, Debug)]
pub struct Operation {
    pub code: u8,
    /// What it does; an ACKNOWLEDGE's class is refined by its AETH syndrome ([`classify`]).
    pub class: OpClass,
    pub place: Place,
    pub header: Header,
    /// Bytes of ImmDt or IETH after the headers above (a SEND's payload starts after them).
    pub imm: u8,
    /// The transports that define it: bit `Transport as u8`.
    pub transports: u8,
}

const RC: u8 = 1 << Transport::Rc as u8;
const UC: u8 = 1 << Transport::Uc as u8;
const RD: u8 = 1 << Transport::Rd as u8;
const UD: u8 = 1 << Transport::Ud as u8;
const XRC: u8 = 1 << Transport::Xrc as u8;

const fn row(
    code: u8,
    class: OpClass,
    place: Place,
    header: Header,
    imm: u8,
    transports: u8,
) -> Operation {
    Operation {
        code,
        class,
        place,
        header,
        imm,
        transports,
    }
}

/// The operation codes (IBTA Vol. 1, table 38 "OpCode field" and 9.3-9.5 for the headers each
/// carries), the one list every opcode decision of the parser and the per-flow analysis reads
/// (through the masks below, computed from it at compile time). Codes absent here (0x15, RD's
/// RESYNC, and 0x18-0x1F) are classed Other.
pub const OPERATIONS: [Operation; 23] = {
    use Header::{Aeth, AtomicEth, Reth};
    use OpClass::*;
    use Place::*;
    const ANY: u8 = RC | UC | RD | XRC;
    [
        row(op::SEND_FIRST, Send, First, Header::None, 0, ANY),
        row(op::SEND_MIDDLE, Send, Middle, Header::None, 0, ANY),
        row(op::SEND_LAST, Send, Last, Header::None, 0, ANY),
        row(op::SEND_LAST_IMM, Send, Last, Header::None, 4, ANY),
        row(op::SEND_ONLY, Send, Only, Header::None, 0, ANY | UD),
        row(op::SEND_ONLY_IMM, Send, Only, Header::None, 4, ANY | UD),
        row(op::WRITE_FIRST, Write, First, Reth, 0, ANY),
        row(op::WRITE_MIDDLE, Write, Middle, Header::None, 0, ANY),
        row(op::WRITE_LAST, Write, Last, Header::None, 0, ANY),
        row(op::WRITE_LAST_IMM, Write, Last, Header::None, 4, ANY),
        row(op::WRITE_ONLY, Write, Only, Reth, 0, ANY),
        row(op::WRITE_ONLY_IMM, Write, Only, Reth, 4, ANY),
        row(op::READ_REQUEST, ReadRequest, Only, Reth, 0, RC | RD | XRC),
        row(
            op::READ_RESPONSE_FIRST,
            ReadResponse,
            First,
            Aeth,
            0,
            RC | RD | XRC,
        ),
        row(
            op::READ_RESPONSE_MIDDLE,
            ReadResponse,
            Middle,
            Header::None,
            0,
            RC | RD | XRC,
        ),
        row(
            op::READ_RESPONSE_LAST,
            ReadResponse,
            Last,
            Aeth,
            0,
            RC | RD | XRC,
        ),
        row(
            op::READ_RESPONSE_ONLY,
            ReadResponse,
            Only,
            Aeth,
            0,
            RC | RD | XRC,
        ),
        row(op::ACKNOWLEDGE, Ack, Only, Aeth, 0, RC | RD | XRC),
        row(
            op::ATOMIC_ACKNOWLEDGE,
            AtomicAck,
            Only,
            Aeth,
            0,
            RC | RD | XRC,
        ),
        row(op::COMPARE_SWAP, Atomic, Only, AtomicEth, 0, RC | RD | XRC),
        row(op::FETCH_ADD, Atomic, Only, AtomicEth, 0, RC | RD | XRC),
        row(op::SEND_LAST_INV, Send, Last, Header::None, 4, RC | XRC),
        row(op::SEND_ONLY_INV, Send, Only, Header::None, 4, RC | XRC),
    ]
};

/// A set of operation codes: bit `code`. Tested as `(MASK >> (opcode & 0x1F)) & 1`, without
/// a branch (the kernel asks these of every RoCE packet).
pub type OpSet = u32;

/// The codes of the operations `keep` selects, as an [`OpSet`].
const fn select(keep: Keep) -> OpSet {
    let mut set = 0;
    let mut i = 0;
    while i < OPERATIONS.len() {
        let o = OPERATIONS[i];
        let chosen = match keep {
            Keep::Of(classes, places) => {
                classes & (1 << o.class as u8) != 0 && places & (1 << o.place as u8) != 0
            }
            Keep::Header(h) => o.header as u8 == h as u8,
            Keep::Imm => o.imm != 0,
            Keep::Transport(t) => o.transports & (1 << t as u8) != 0,
        };
        if chosen {
            set |= 1 << o.code;
        }
        i += 1;
    }
    set
}

/// What [`select`] keeps.
#[derive(Clone, Copy)]
enum Keep {
    /// Operations of these classes ([`classes`]) at these places of their message ([`places`]).
    Of(u16, u8),
    Header(Header),
    Imm,
    Transport(Transport),
}

/// A set of classes for [`Keep::Of`].
const fn classes(list: &[OpClass]) -> u16 {
    let mut set = 0;
    let mut i = 0;
    while i < list.len() {
        set |= 1 << list[i] as u8;
        i += 1;
    }
    set
}

/// A set of places for [`Keep::Of`].
const fn places(list: &[Place]) -> u8 {
    let mut set = 0;
    let mut i = 0;
    while i < list.len() {
        set |= 1 << list[i] as u8;
        i += 1;
    }
    set
}

const ANYWHERE: u8 = places(&[Place::First, Place::Middle, Place::Last, Place::Only]);
const ALL_CLASSES: u16 = u16::MAX;
/// The classes whose packets make messages the observer counts (SEND, WRITE, READ).
const MESSAGES: u16 = classes(&[OpClass::Send, OpClass::Write, OpClass::ReadRequest]);

/// SENDs.
pub const SEND_OPS: OpSet = select(Keep::Of(classes(&[OpClass::Send]), ANYWHERE));
/// SENDs that end a message of several packets / that are a message alone.
pub const SEND_LAST_OPS: OpSet =
    select(Keep::Of(classes(&[OpClass::Send]), places(&[Place::Last])));
pub const SEND_ONLY_OPS: OpSet =
    select(Keep::Of(classes(&[OpClass::Send]), places(&[Place::Only])));
/// Operations with ImmDt or IETH (4 bytes).
pub const IMM_OPS: OpSet = select(Keep::Imm);
/// Operations whose first extended header is a RETH / an AETH.
pub const RETH_OPS: OpSet = select(Keep::Header(Header::Reth));
pub const AETH_OPS: OpSet = select(Keep::Header(Header::Aeth));
/// READ responses and acknowledgements: they carry no DETH (RD) and no XRCETH (XRC).
pub const RESPONSE_OPS: OpSet = select(Keep::Of(
    classes(&[OpClass::ReadResponse, OpClass::Ack, OpClass::AtomicAck]),
    ANYWHERE,
));
/// The packets that start or end a message: a SEND's FIRST, LAST or ONLY, a WRITE's FIRST or
/// ONLY (its RETH has the length), a READ request.
pub const BOUNDARY_OPS: OpSet =
    select(Keep::Of(MESSAGES, places(&[Place::First, Place::Only]))) | SEND_LAST_OPS;
/// FIRST and MIDDLE packets (SEND, WRITE, READ response): their payload is one path MTU.
pub const FULL_OPS: OpSet = select(Keep::Of(
    ALL_CLASSES,
    places(&[Place::First, Place::Middle]),
));
/// Requests that end their message (LAST or ONLY): the responder answers them.
pub const REQUEST_END_OPS: OpSet = select(Keep::Of(
    classes(&[
        OpClass::Send,
        OpClass::Write,
        OpClass::ReadRequest,
        OpClass::Atomic,
    ]),
    places(&[Place::Last, Place::Only]),
));
/// READ responses that start their response (FIRST or ONLY).
pub const RESPONSE_START_OPS: OpSet = select(Keep::Of(
    classes(&[OpClass::ReadResponse]),
    places(&[Place::First, Place::Only]),
));

/// The operations each transport defines, indexed by `opcode >> 5` (CNP and vendor codes:
/// none).
const DEFINED: [OpSet; 8] = [
    select(Keep::Transport(Transport::Rc)),
    select(Keep::Transport(Transport::Uc)),
    select(Keep::Transport(Transport::Rd)),
    select(Keep::Transport(Transport::Ud)),
    0,
    select(Keep::Transport(Transport::Xrc)),
    0,
    0,
];

/// The class of operation `$low`: one set test per class, each set read from the table at
/// compile time. Tests, not a lookup: a class loaded from memory would be unbounded to the BPF
/// verifier, and classes index arrays of counters.
macro_rules! class_of {
    ($low:expr; $($class:ident),*) => {
        $(if in_set(const { select(Keep::Of(classes(&[OpClass::$class]), ANYWHERE)) }, $low) {
            OpClass::$class
        } else)* {
            OpClass::Other
        }
    };
}

/// Whether the operation `code` (`opcode & 0x1F`) is in `set`.
#[inline(always)]
pub const fn in_set(set: OpSet, code: u8) -> bool {
    (set >> (code & 0x1F)) & 1 != 0
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
    if opcode == wire::OPCODE_CNP {
        return OpClass::Cnp;
    }
    // Each transport defines a subset of the operations; the rest are reserved.
    if !in_set(DEFINED[(opcode >> 5) as usize], opcode) {
        return OpClass::Other;
    }
    let class = class_of!(opcode; Send, Write, ReadRequest, ReadResponse, Ack, AtomicAck, Atomic);
    match class {
        // An ACKNOWLEDGE cut before its AETH still is an acknowledgement.
        OpClass::Ack if aeth_syndrome == NO_AETH => OpClass::Ack,
        OpClass::Ack => match (aeth_syndrome as u8) >> 5 {
            wire::AETH_ACK => OpClass::Ack,
            wire::AETH_RNR_NAK => OpClass::RnrNak,
            wire::AETH_NAK => OpClass::Nak,
            _ => OpClass::Other,
        },
        class => class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sets as the specification lists their members, by name.
    #[test]
    fn the_sets_read_from_the_table_are_the_specifications() {
        let set = |codes: &[u8]| codes.iter().fold(0, |s, &c| s | 1 << c);
        use op::*;
        assert_eq!(
            BOUNDARY_OPS,
            set(&[
                SEND_FIRST,
                SEND_LAST,
                SEND_LAST_IMM,
                SEND_ONLY,
                SEND_ONLY_IMM,
                SEND_LAST_INV,
                SEND_ONLY_INV,
                WRITE_FIRST,
                WRITE_ONLY,
                WRITE_ONLY_IMM,
                READ_REQUEST
            ])
        );
        assert_eq!(
            RETH_OPS,
            set(&[WRITE_FIRST, WRITE_ONLY, WRITE_ONLY_IMM, READ_REQUEST])
        );
        assert_eq!(
            AETH_OPS,
            set(&[
                READ_RESPONSE_FIRST,
                READ_RESPONSE_LAST,
                READ_RESPONSE_ONLY,
                ACKNOWLEDGE,
                ATOMIC_ACKNOWLEDGE
            ])
        );
        assert_eq!(
            RESPONSE_OPS,
            set(&[
                READ_RESPONSE_FIRST,
                READ_RESPONSE_MIDDLE,
                READ_RESPONSE_LAST,
                READ_RESPONSE_ONLY,
                ACKNOWLEDGE,
                ATOMIC_ACKNOWLEDGE
            ])
        );
        assert_eq!(
            SEND_LAST_OPS,
            set(&[SEND_LAST, SEND_LAST_IMM, SEND_LAST_INV])
        );
        assert_eq!(
            SEND_ONLY_OPS,
            set(&[SEND_ONLY, SEND_ONLY_IMM, SEND_ONLY_INV])
        );
        assert_eq!(
            FULL_OPS,
            set(&[
                SEND_FIRST,
                SEND_MIDDLE,
                WRITE_FIRST,
                WRITE_MIDDLE,
                READ_RESPONSE_FIRST,
                READ_RESPONSE_MIDDLE
            ])
        );
        assert_eq!(
            REQUEST_END_OPS,
            set(&[
                SEND_LAST,
                SEND_LAST_IMM,
                SEND_ONLY,
                SEND_ONLY_IMM,
                WRITE_LAST,
                WRITE_LAST_IMM,
                WRITE_ONLY,
                WRITE_ONLY_IMM,
                READ_REQUEST,
                COMPARE_SWAP,
                FETCH_ADD,
                SEND_LAST_INV,
                SEND_ONLY_INV
            ])
        );
        assert_eq!(
            RESPONSE_START_OPS,
            set(&[READ_RESPONSE_FIRST, READ_RESPONSE_ONLY])
        );
        assert_eq!(
            IMM_OPS & SEND_OPS,
            set(&[SEND_LAST_IMM, SEND_ONLY_IMM, SEND_LAST_INV, SEND_ONLY_INV])
        );
        // UC: SENDs and WRITEs; UD: SEND ONLY with or without immediate; RD: no invalidate.
        assert_eq!(
            DEFINED[Transport::Uc as usize],
            (1 << (WRITE_ONLY_IMM + 1)) - 1
        );
        assert_eq!(
            DEFINED[Transport::Ud as usize],
            set(&[SEND_ONLY, SEND_ONLY_IMM])
        );
        assert_eq!(DEFINED[Transport::Rd as usize], (1 << (FETCH_ADD + 1)) - 1);
        assert_eq!(
            DEFINED[Transport::Rc as usize],
            DEFINED[Transport::Xrc as usize]
        );
    }

    #[test]
    fn the_table_has_each_code_once_in_order() {
        for pair in OPERATIONS.windows(2) {
            assert!(pair[0].code < pair[1].code, "{pair:?}");
        }
        // RC defines every operation: its class is the row's.
        for o in OPERATIONS {
            assert_eq!(classify(o.code, None), o.class, "{o:?}");
        }
    }
}
