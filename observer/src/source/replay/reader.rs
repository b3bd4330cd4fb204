//! The capture files read: pcap or pcapng behind one reader, the frames cut from its buffers.

use super::*;

/// Opens a file, with its size when it is a regular file (for the progress line).
pub(super) fn open(path: &str) -> Result<(File, Option<u64>), ReplayError> {
    // (Memory-mapping was measured slower than streaming through a cached buffer here:
    // page faults cost more than the copy.)
    let f = File::open(path).map_err(|error| ReplayError::Io {
        file: path.to_string(),
        error,
    })?;
    let size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    Ok((f, size))
}

/// A frame read and not yet accounted: its time, length on the wire and link type, and where
/// its bytes lie in the record its file consumed last (there until the file reads on).
#[derive(Clone, Copy, Debug)]
pub(super) struct Pending {
    pub(super) ts_ns: u64,
    pub(super) orig_len: u32,
    pub(super) link: Link,
    pub(super) at: usize,
    pub(super) len: usize,
}

/// Where `data` begins in `buf`, the bytes a pcap-file slice parser was given: its frames
/// borrow from them.
#[inline]
pub(super) fn offset_in(buf: &[u8], data: &[u8]) -> usize {
    (data.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize)
}

/// The container of a file being read.
pub(super) enum Container {
    Pcap(pcap::Pcap),
    PcapNg(pcapng::PcapNg),
}

/// A capture file being read, a frame at a time.
pub(super) struct Reader<'a, R> {
    pub(super) feed: Feed<'a, R>,
    pub(super) container: Container,
    pub(super) ctx: Ctx,
}

impl<'a, R: Read> Reader<'a, R> {
    /// Recognizes the container by its magic and reads the file header.
    pub(super) fn open(
        name: &str,
        mut feed: Feed<'a, R>,
        size: Option<u64>,
        progress: bool,
    ) -> Result<Self, ReplayError> {
        let head = feed.peek(4).map_err(|error| ReplayError::Io {
            file: name.to_string(),
            error,
        })?;
        if head.is_empty() {
            return Err(ReplayError::Empty {
                file: name.to_string(),
            });
        }
        let magic = head
            .get(..4)
            .map(|m| u32::from_be_bytes([m[0], m[1], m[2], m[3]]));
        let magic_text = head
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ");
        let mut ctx = Ctx {
            name: name.to_string(),
            unknown_interfaces: Vec::new(),
            frame: 0,
            offset: 0,
            progress: Progress::new(name, size, progress),
            warnings: Vec::new(),
            unsupported: 0,
        };
        let container = match magic {
            Some(0xA1B2_C3D4 | 0xD4C3_B2A1 | 0xA1B2_3C4D | 0x4D3C_B2A1) => {
                Container::Pcap(pcap::Pcap::open(&mut feed, &mut ctx)?)
            }
            Some(0x0A0D_0D0A) => Container::PcapNg(pcapng::PcapNg::open(&mut feed, &mut ctx)?),
            _ => {
                return Err(ReplayError::BadMagic {
                    file: name.to_string(),
                    magic: magic_text,
                });
            }
        };
        Ok(Self {
            feed,
            container,
            ctx,
        })
    }

    /// The next frame; none at the end of the file or at a break.
    #[inline]
    pub(super) fn next(&mut self) -> Option<Pending> {
        match &mut self.container {
            Container::Pcap(c) => c.next(&mut self.feed, &mut self.ctx),
            Container::PcapNg(c) => c.next(&mut self.feed, &mut self.ctx),
        }
    }

    /// The bytes of the frame [`Reader::next`] gave last.
    #[inline]
    pub(super) fn data(&self, f: &Pending) -> &[u8] {
        self.feed.consumed(f.at, f.len)
    }
}

/// The file header through the crate's parser; what it consumed.
pub(super) fn header<R: Read, P>(
    feed: &mut Feed<'_, R>,
    name: &str,
    parse: impl Fn(&[u8]) -> Result<(&[u8], P), PcapError>,
) -> Result<(P, u64), ReplayError> {
    let mut out = None;
    let fed = feed.next(|buf| match parse(buf) {
        Ok((rest, p)) => {
            let used = buf.len() - rest.len();
            out = Some(p);
            Step::Used(used)
        }
        Err(PcapError::IncompleteBuffer) => Step::More,
        Err(e) => Step::Fail(e),
    });
    match (fed, out) {
        (Ok(used), Some(p)) => Ok((p, used as u64)),
        (Err(FeedError::Io(error)), _) => Err(ReplayError::Io {
            file: name.to_string(),
            error,
        }),
        (Err(e), _) => Err(ReplayError::Header {
            file: name.to_string(),
            detail: e.describe(),
        }),
        // A clean end before the header: the parser wanted more than the file holds.
        (Ok(_), None) => Err(ReplayError::Header {
            file: name.to_string(),
            detail: FeedError::Cut.describe(),
        }),
    }
}

/// Where a file's reading stands, and what it found beside the frames.
pub(super) struct Ctx {
    pub(super) name: String,
    /// pcapng interface IDs already warned about (no interface description).
    pub(super) unknown_interfaces: Vec<u32>,
    /// Frames read so far.
    pub(super) frame: u64,
    /// Byte offset of the next record.
    pub(super) offset: u64,
    pub(super) progress: Progress,
    /// This file's warnings, in the order found.
    pub(super) warnings: Vec<String>,
    /// Frames of interfaces whose link type is not supported.
    pub(super) unsupported: u64,
}

impl Ctx {
    #[inline]
    pub(super) fn advance(&mut self, bytes: u64) {
        self.frame += 1;
        self.offset += bytes;
        if self.frame.is_multiple_of(65_536) {
            self.progress.tick(self.offset, self.frame);
        }
    }

    /// The file breaks at the next record: what was read before it is kept.
    pub(super) fn broken(&mut self, what: &str) {
        self.warnings.push(format!(
            "{}: frame {} at byte {}: {what}; the {} frames before it are reported",
            self.name,
            self.frame + 1,
            self.offset,
            self.frame
        ));
    }
}
