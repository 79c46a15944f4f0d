//! A classic pcap writer (link type Ethernet, microsecond timestamps), so that the frames
//! the device sends and receives can be read with tcpdump or Wireshark (which decodes
//! UDP port 4791 as RoCEv2).
//!
//! The file format is the libpcap one: a 24-byte global header, then for each frame a
//! 16-byte record header and the frame's bytes. Everything is written little-endian
//! (readers tell the byte order from the magic number), so files are the same on every
//! host.
//!
//! The writer flushes after every frame so that a crash keeps everything written so far.
//! It takes `&mut self` and holds no interior state beyond its sink, so the device shares
//! one as `Mutex<PcapWriter<_>>`: a frame is written whole while the lock is held, and
//! frames from different threads never interleave.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The magic number of classic pcap with microsecond timestamps.
const MAGIC_MICROS: u32 = 0xA1B2_C3D4;
/// The file format version, 2.4: the only one in use.
const VERSION_MAJOR: u16 = 2;
const VERSION_MINOR: u16 = 4;
/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// The largest number of bytes kept of one frame. Frames are never longer (IPv4 caps a
/// RoCE frame at 65549 bytes with its Ethernet header), so nothing is cut in practice.
pub const SNAPLEN: u32 = 262_144;

/// Writes frames to a pcap stream over any [`Write`].
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    sink: W,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (or truncates) the file at `path` and writes the pcap header to it.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::new(BufWriter::new(File::create(path)?))
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the pcap global header to `sink` (and flushes it) and returns the writer.
    pub fn new(mut sink: W) -> io::Result<Self> {
        let mut header = [0u8; 24];
        header[0..4].copy_from_slice(&MAGIC_MICROS.to_le_bytes());
        header[4..6].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        header[6..8].copy_from_slice(&VERSION_MINOR.to_le_bytes());
        // 8..12: thiszone, 12..16: sigfigs; both 0 (timestamps are UTC).
        header[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        header[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        sink.write_all(&header)?;
        sink.flush()?;
        Ok(Self { sink })
    }

    /// Writes one Ethernet frame stamped with the current time, and flushes.
    pub fn write_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        self.write_frame_at(SystemTime::now(), frame)
    }

    /// Writes one Ethernet frame stamped with `time`, and flushes. A time before 1970
    /// is written as 0; seconds past 2106 wrap, as the format has 32 bits for them.
    pub fn write_frame_at(&mut self, time: SystemTime, frame: &[u8]) -> io::Result<()> {
        let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let kept = frame.len().min(SNAPLEN as usize);
        let mut record = [0u8; 16];
        record[0..4].copy_from_slice(&(since_epoch.as_secs() as u32).to_le_bytes());
        record[4..8].copy_from_slice(&since_epoch.subsec_micros().to_le_bytes());
        record[8..12].copy_from_slice(&(kept as u32).to_le_bytes());
        // The original length; saturates for frames beyond 4 GiB, which cannot occur.
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        record[12..16].copy_from_slice(&orig.to_le_bytes());
        self.sink.write_all(&record)?;
        self.sink.write_all(&frame[..kept])?;
        self.sink.flush()
    }

    /// The sink, e.g. to inspect what was written in tests.
    pub fn get_ref(&self) -> &W {
        &self.sink
    }

    /// Gives the sink back.
    pub fn into_inner(self) -> W {
        self.sink
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([b[at], b[at + 1]])
    }

    /// Reads back a pcap stream: (link type, [(secs, micros, orig_len, bytes)]).
    #[allow(clippy::type_complexity)]
    fn read_back(b: &[u8]) -> (u32, Vec<(u32, u32, u32, Vec<u8>)>) {
        assert_eq!(u32_at(b, 0), 0xA1B2_C3D4);
        assert_eq!(u16_at(b, 4), 2);
        assert_eq!(u16_at(b, 6), 4);
        assert_eq!(u32_at(b, 8), 0);
        assert_eq!(u32_at(b, 12), 0);
        assert_eq!(u32_at(b, 16), SNAPLEN);
        let link = u32_at(b, 20);
        let mut records = Vec::new();
        let mut at = 24;
        while at < b.len() {
            let incl = u32_at(b, at + 8) as usize;
            records.push((
                u32_at(b, at),
                u32_at(b, at + 4),
                u32_at(b, at + 12),
                b[at + 16..at + 16 + incl].to_vec(),
            ));
            at += 16 + incl;
        }
        assert_eq!(at, b.len());
        (link, records)
    }

    #[test]
    fn round_trips_header_and_two_records() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        assert_eq!(w.get_ref().len(), 24);
        let t1 = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        let t2 = UNIX_EPOCH + Duration::new(1_700_000_001, 999_999_999);
        w.write_frame_at(t1, &[1, 2, 3]).unwrap();
        w.write_frame_at(t2, &[0xAA; 60]).unwrap();
        let (link, records) = read_back(&w.into_inner());
        assert_eq!(link, 1);
        assert_eq!(
            records,
            vec![
                (1_700_000_000, 123_456, 3, vec![1, 2, 3]),
                (1_700_000_001, 999_999, 60, vec![0xAA; 60]),
            ]
        );
    }

    #[test]
    fn file_keeps_each_frame_without_drop_and_works_behind_a_mutex() {
        let path = std::env::temp_dir().join(format!("rnic-pcap-test-{}.pcap", std::process::id()));
        let w = Mutex::new(PcapWriter::create(&path).unwrap());
        w.lock().unwrap().write_frame(&[7; 58]).unwrap();
        w.lock().unwrap().write_frame(&[8; 14]).unwrap();
        // Read while the writer is still alive: flushing per frame put it all in the file.
        let bytes = std::fs::read(&path).unwrap();
        let (link, records) = read_back(&bytes);
        assert_eq!(link, LINKTYPE_ETHERNET);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].3, vec![7; 58]);
        assert_eq!(records[1].2, 14);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as u32;
        assert!(records[0].0 <= now && now - records[0].0 < 60);
        drop(w);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn time_before_epoch_is_zero() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame_at(UNIX_EPOCH - Duration::from_secs(5), &[1])
            .unwrap();
        let (_, records) = read_back(&w.into_inner());
        assert_eq!(records, vec![(0, 0, 1, vec![1])]);
    }
}
