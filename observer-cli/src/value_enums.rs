//! clap's copies of the library's choices, converted with `From`: the library has no clap.

use clap::ValueEnum;
use roce_observer::{
    analysis::ecmp::{Bucket, Fields, HashFn},
    source::live::{AttachMode, Mode, TcHook, Vantage},
};

/// XDP attach mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum XdpModeArg {
    /// Native when the driver supports it, generic otherwise (the kernel decides).
    #[default]
    Auto,
    /// Generic XDP (works on every interface).
    Skb,
    /// Driver (native) XDP.
    Native,
}

impl From<XdpModeArg> for AttachMode {
    fn from(a: XdpModeArg) -> Self {
        match a {
            XdpModeArg::Auto => Self::Auto,
            XdpModeArg::Skb => Self::Skb,
            XdpModeArg::Native => Self::Native,
        }
    }
}

/// Which TC egress hook host mode uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum TcHookArg {
    /// tcx on kernels from 6.6, clsact before.
    #[default]
    Auto,
    /// tcx (kernel 6.6+): a link ahead of the programs already there.
    Tcx,
    /// A filter on the clsact qdisc (added when missing, left afterwards), ahead of the
    /// filters already there.
    Clsact,
}

impl From<TcHookArg> for TcHook {
    fn from(a: TcHookArg) -> Self {
        match a {
            TcHookArg::Auto => Self::Auto,
            TcHookArg::Tcx => Self::Tcx,
            TcHookArg::Clsact => Self::Clsact,
        }
    }
}

/// Where the observer sits: `--mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// A host's own interface: every frame passes on unchanged.
    #[default]
    Host,
    /// A SPAN/ERSPAN destination port, in promiscuous mode while observed.
    Mirror,
}

impl From<ModeArg> for Mode {
    fn from(a: ModeArg) -> Self {
        match a {
            ModeArg::Host => Self::Host,
            ModeArg::Mirror => Self::Mirror,
        }
    }
}

impl ModeArg {
    /// The vantage point with `--consume`; consuming needs mirror mode (host mode never drops
    /// a packet).
    pub fn vantage(self, consume: bool) -> anyhow::Result<Vantage> {
        Vantage::of(self.into(), consume).ok_or_else(|| {
            anyhow::anyhow!("--consume needs --mode mirror (host mode never drops a packet)")
        })
    }
}

/// The hash function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HashArg {
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

impl HashArg {
    /// Refuses a seed wider than the hash value (only CRC-16 is narrower than 32 bits).
    pub fn check_seed(self, seed: u32, flag: &str) -> anyhow::Result<()> {
        let width = HashFn::from(self).width();
        if width < 32 && seed >> width != 0 {
            anyhow::bail!("{flag} {seed:#x} does not fit CRC-16 (at most 0xffff)");
        }
        Ok(())
    }
}

impl From<HashArg> for HashFn {
    fn from(a: HashArg) -> Self {
        match a {
            HashArg::Crc32 => Self::Crc32,
            HashArg::Crc32c => Self::Crc32c,
            HashArg::Crc16Ccitt => Self::Crc16Ccitt,
            HashArg::XorFold => Self::XorFold,
            HashArg::Toeplitz => Self::Toeplitz,
        }
    }
}

/// The header fields hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FieldsArg {
    /// Source and destination IP, protocol (UDP), source and destination port.
    #[value(name = "5tuple")]
    FiveTuple,
    /// The 5-tuple and the BTH destination QP (switches with RoCE-aware "enhanced ECMP").
    #[value(name = "5tuple+qp")]
    FiveTupleQp,
    /// Source and destination IP only.
    #[value(name = "ip")]
    IpPair,
}

impl From<FieldsArg> for Fields {
    fn from(a: FieldsArg) -> Self {
        match a {
            FieldsArg::FiveTuple => Self::FiveTuple,
            FieldsArg::FiveTupleQp => Self::FiveTupleQp,
            FieldsArg::IpPair => Self::IpPair,
        }
    }
}

/// How a hash value picks one of N members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BucketArg {
    /// hash mod N.
    Modulo,
    /// The upper bits: (hash x N) >> width, which for N a power of two is the top log2(N) bits.
    UpperBits,
}

impl From<BucketArg> for Bucket {
    fn from(a: BucketArg) -> Self {
        match a {
            BucketArg::Modulo => Self::Modulo,
            BucketArg::UpperBits => Self::UpperBits,
        }
    }
}

#[cfg(test)]
mod tests {
    use roce_observer::units::Named;

    use super::*;

    /// Every clap name is the library's name of the same choice (config files and JSON use
    /// the library's).
    fn same_names<A: ValueEnum + Copy, L: Named + From<A>>() {
        let clap: Vec<String> = A::value_variants()
            .iter()
            .map(|v| v.to_possible_value().unwrap().get_name().to_string())
            .collect();
        let lib: Vec<String> = A::value_variants()
            .iter()
            .map(|v| L::from(*v).name().to_string())
            .collect();
        assert_eq!(clap, lib);
        assert_eq!(lib.len(), L::ALL.len());
    }

    #[test]
    fn clap_names_are_the_library_names() {
        same_names::<XdpModeArg, AttachMode>();
        same_names::<TcHookArg, TcHook>();
        same_names::<ModeArg, Mode>();
        same_names::<HashArg, HashFn>();
        same_names::<FieldsArg, Fields>();
        same_names::<BucketArg, Bucket>();
    }
}
