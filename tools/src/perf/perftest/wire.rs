//! perftest 6.24's TCP exchange as `rnic-perf --perftest` speaks it: its messages and
//! their bytes, and perftest's way of printing addresses and results (docs/tools.md,
//! "`rnic-perf --perftest`: the exchange"); the order is [`super`]'s, the connection
//! [`crate::rendezvous`]'s.
use rnic_abi::verbs::mtu_bytes;
use serde::Serialize;

use super::Test;
use crate::error::{Result, ToolError};

/// The perftest version whose exchange this module speaks.
pub const VERSION: &str = "6.24";
/// Bytes of the version message (perftest's `MAX_VERSION`).
pub const VERSION_LEN: usize = 16;
/// The oldest peer perftest 6.24 accepts.
pub const MIN_PEER_VERSION: f64 = 5.70;
/// Bytes of the address message with a GID (perftest's `KEY_MSG_SIZE_GID`).
pub const DEST_LEN: usize = 108;
/// Bytes of the MTU message.
pub const MTU_LEN: usize = 2;
/// This side's page size ("cycle buffer") as sent.
pub const CYCLE_BUFFER: u32 = 4096;
/// This side's cache line size as sent.
pub const CACHE_LINE: u32 = 64;
/// perftest's `pingpong_dest` as the address message carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA READs this side accepts (and the peer may issue).
    pub out_reads: u32,
    /// QP number.
    pub qpn: u32,
    /// First PSN this side sends.
    pub psn: u32,
    /// rkey of the buffer.
    pub rkey: u32,
    /// Address of the buffer the peer writes or reads.
    pub vaddr: u64,
    /// GID, in wire order.
    pub gid: [u8; 16],
    /// SRQ number (XRC and DC only; 0 here).
    pub srqn: u32,
}

/// The address message: text of [`DEST_LEN`] - 1 characters and a NUL.
pub fn encode_dest(d: &Dest) -> [u8; DEST_LEN] {
    let mut text = format!(
        "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
        d.lid, d.out_reads, d.qpn, d.psn, d.rkey, d.vaddr
    );
    for b in d.gid {
        text += &format!("{b:02x}:");
    }
    text += &format!("{:08x}:", d.srqn);
    let mut msg = [0u8; DEST_LEN];
    let n = text.len().min(DEST_LEN - 1);
    msg[..n].copy_from_slice(&text.as_bytes()[..n]);
    msg
}

/// Parses the peer's address message: 23 hexadecimal fields separated by `:`, up to the
/// NUL, as perftest's `ethernet_read_keys` reads them.
pub fn decode_dest(msg: &[u8]) -> Result<Dest> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let text = std::str::from_utf8(&msg[..end])
        .map_err(|_| ToolError("the peer's address message is not text".into()))?;
    let bad = || {
        ToolError(format!(
            "the peer's address message {text:?} is not perftest's \
             LID:OUT_READS:QPN:PSN:RKEY:VADDR:16 GID bytes:SRQN (is it perftest on RoCE, \
             with the same test on both sides?)"
        ))
    };
    let fields: Vec<&str> = text.split(':').collect();
    // 22 fields and the SRQN; a trailing ':' leaves an empty last field.
    if fields.len() < 23 || fields[23..].iter().any(|f| !f.is_empty()) {
        return Err(bad());
    }
    let hex = |i: usize, max: u64| -> Result<u64> {
        u64::from_str_radix(fields[i], 16)
            .ok()
            .filter(|&v| v <= max)
            .ok_or_else(bad)
    };
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        *b = hex(6 + i, 0xff)? as u8;
    }
    Ok(Dest {
        lid: hex(0, 0xffff)? as u16,
        out_reads: hex(1, u32::MAX.into())? as u32,
        qpn: hex(2, 0xff_ffff)? as u32,
        psn: hex(3, 0xff_ffff)? as u32,
        rkey: hex(4, u32::MAX.into())? as u32,
        vaddr: hex(5, u64::MAX)?,
        gid,
        srqn: hex(22, u32::MAX.into())? as u32,
    })
}

/// This side's version message: [`VERSION`] padded with NULs.
pub fn encode_version() -> [u8; VERSION_LEN] {
    let mut msg = [0u8; VERSION_LEN];
    msg[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    msg
}

/// The peer's version text (up to the NUL) and its value as C's `atof` reads it (the
/// longest leading decimal number; 0 if none).
pub fn decode_version(msg: &[u8]) -> (String, f64) {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let text = String::from_utf8_lossy(&msg[..end]).into_owned();
    let trimmed = text.trim_start();
    let mut longest = 0.0;
    for n in 1..=trimmed.len() {
        if let Some(v) = trimmed.get(..n).and_then(|s| s.parse::<f64>().ok()) {
            longest = v;
        }
    }
    (text, longest)
}

/// The MTU message: the `ibv_mtu` code (1 = 256 ... 5 = 4096) in decimal, then a NUL.
pub fn encode_mtu(code: u8) -> [u8; MTU_LEN] {
    [b'0' + code.min(9), 0]
}

/// The peer's MTU code, if it is one perftest takes (1 to 5).
pub fn decode_mtu(msg: &[u8]) -> Option<u8> {
    let digits: String = msg
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .map(|&b| b as char)
        .collect();
    digits
        .parse::<u8>()
        .ok()
        .filter(|&c| mtu_bytes(c).is_some())
}

/// A bandwidth report as perftest's `bw_report_data` travels (the fields exchanged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct BwReport {
    /// Bytes per message.
    pub size: u64,
    /// Messages.
    pub iters: u64,
    /// Peak bandwidth, MiB/s.
    pub bw_peak: f64,
    /// Average bandwidth, MiB/s.
    pub bw_avg: f64,
    /// Messages per microsecond (Mpps).
    pub msg_rate: f64,
}

impl BwReport {
    /// The five big-endian pieces, in the order they are exchanged.
    pub fn pieces(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// The report from its five pieces.
    pub fn from_pieces(p: &[[u8; 8]; 5]) -> BwReport {
        let f = |b: [u8; 8]| f64::from_bits(u64::from_be_bytes(b));
        BwReport {
            size: u64::from_be_bytes(p[0]),
            iters: u64::from_be_bytes(p[1]),
            bw_peak: f(p[2]),
            bw_avg: f(p[3]),
            msg_rate: f(p[4]),
        }
    }

    /// perftest's result line (`REPORT_FMT`), without the newline.
    pub fn line(&self) -> String {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t     {:<7.6}",
            self.size, self.iters, self.bw_peak, self.bw_avg, self.msg_rate
        )
    }
}

/// perftest's `RESULT_LINE`.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
/// perftest's column heads (`RESULT_FMT`).
pub const RESULT_HEAD: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";

/// C's `%#0Nx`: `0x` and zero-padded hex to N characters in all, but a plain zero-padded
/// `0` for the value 0 (C prints no prefix for zero).
fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

/// perftest's address lines for `side` ("local" or "remote"): the address line and the
/// GID line (bytes in decimal, as perftest's `PERF_GID_FMT` prints them).
pub fn address_lines(side: &str, test: Test, d: &Dest) -> String {
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        c_alt_hex(d.lid.into(), 4),
        c_alt_hex(d.qpn.into(), 6),
        c_alt_hex(d.psn.into(), 6)
    );
    if test == Test::ReadBw {
        s += &format!(" OUT {}", c_alt_hex(d.out_reads.into(), 4));
    }
    s += &format!(
        " RKey {} VAddr {}\n GID: ",
        c_alt_hex(d.rkey.into(), 8),
        c_alt_hex(d.vaddr, 16)
    );
    let gid: Vec<String> = d.gid.iter().map(|b| format!("{b:02}")).collect();
    s + &gid.join(":")
}

/// Where message `i` starts in a buffer, as perftest walks it: slots of `size` rounded up
/// to the cache line, wrapping after a page ("cycle buffer"), when `size` is at most half
/// a page; offset 0 otherwise. Returns the offsets of all slots used.
pub fn slot_offsets(size: usize, cycle: usize, cache_line: usize, iters: u64) -> Vec<usize> {
    if size > cycle / 2 {
        return vec![0];
    }
    let step = if size > cache_line {
        size.next_multiple_of(cache_line)
    } else {
        cache_line
    };
    let slots = ((cycle / step) as u64).min(iters).max(1) as usize;
    (0..slots).map(|k| k * step).collect()
}

/// Bytes a side's buffer needs: perftest's `BUFF_SIZE(size, cycle_buffer)`.
pub fn region_len(size: usize, cycle: usize) -> usize {
    size.max(cycle)
}

/// Whether a GID is an IPv4-mapped address (perftest's `ipv6_addr_v4mapped`, including
/// its IPv4 multicast form).
pub fn v4_mapped(gid: &[u8; 16]) -> bool {
    let words: Vec<u32> = gid
        .chunks(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // ::ffff:a.b.c.d, or ff0e::ffff:a.b.c.d (IPv4 multicast).
    (words[0] == 0 || words[0] == 0xff0e_0000) && words[1] == 0 && words[2] == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::perftest::tests::{dest, GID};

    /// perftest's `sprintf(msg, KEY_PRINT_FMT_GID, ...)` into `char msg[KEY_MSG_SIZE_GID]`,
    /// built field by field as its format string reads.
    fn perftest_dest_msg(f: [u64; 6], gid: [u8; 16], srqn: u32) -> Vec<u8> {
        let mut s = String::new();
        for (v, w) in f.iter().zip([4usize, 4, 6, 6, 8, 16]) {
            s += &format!("{v:0w$x}:");
        }
        for b in gid {
            s += &format!("{b:02x}:");
        }
        s += &format!("{srqn:08x}:");
        let mut m = s.into_bytes();
        m.resize(108, 0);
        m
    }

    #[test]
    fn the_address_message_is_perftests_byte_for_byte() {
        let msg = encode_dest(&dest());
        assert_eq!(
            msg.to_vec(),
            perftest_dest_msg([0, 0x10, 0x11, 0x5a3c1f, 0x201, 0x1_0000], GID, 0)
        );
        assert_eq!(
            &msg[..107],
            b"0000:0010:000011:5a3c1f:00000201:0000000000010000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:52:00:02:00000000:".as_slice()
        );
        assert_eq!(msg[107], 0);
        assert_eq!(decode_dest(&msg).unwrap(), dest());
    }

    #[test]
    fn what_perftest_sends_parses() {
        // An rxe QP of ib_read_bw: 128 outstanding reads, a user-space address.
        let gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 82, 1, 10];
        let wire = perftest_dest_msg([0, 0x80, 0x12, 0xabcdef, 0x1e3f, 0x7f3a_5c21_0000], gid, 0);
        let d = decode_dest(&wire).unwrap();
        assert_eq!(
            (d.out_reads, d.qpn, d.psn, d.rkey),
            (0x80, 0x12, 0xabcdef, 0x1e3f)
        );
        assert_eq!(d.vaddr, 0x7f3a_5c21_0000);
        assert_eq!(rnic_abi::gid::ip(&d.gid).to_string(), "::ffff:10.82.1.10");
        // Upper case hex, as strtol takes it.
        let upper = String::from_utf8(wire.clone()).unwrap().to_uppercase();
        assert_eq!(decode_dest(upper.as_bytes()).unwrap(), d);
    }

    #[test]
    fn foreign_address_messages_are_refused() {
        // ibv_rc_pingpong's 52-byte message, and perftest's 59-byte form without a GID.
        for bad in [
            b"0000:000011:abcdef:00000000000000000000ffff0a520002\0".to_vec(),
            b"0000:0001:000011:abcdef:00000201:0000000000010000:00000000\0".to_vec(),
            b"zz\0".to_vec(),
        ] {
            let e = decode_dest(&bad).unwrap_err();
            assert!(e.0.contains("is not perftest's"), "{e}");
        }
        let mut too_big = perftest_dest_msg([0, 1, 0x1_000000, 0, 0, 0], GID, 0);
        too_big.truncate(108);
        assert!(decode_dest(&too_big).is_err(), "a QPN above 24 bits");
    }

    #[test]
    fn version_mtu_and_sizes_are_perftests() {
        // strncpy(user_param.version, "6.24", 16): the text and 12 NULs.
        assert_eq!(&encode_version(), b"6.24\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(
            decode_version(b"6.24\0\0\0\0\0\0\0\0\0\0\0\0"),
            ("6.24".into(), 6.24)
        );
        assert_eq!(decode_version(b"5.70beta\0").1, 5.70);
        assert_eq!(decode_version(b"x\0").1, 0.0);
        // sprintf(cur, "%d", IBV_MTU_1024) and 2 bytes of it.
        assert_eq!(&encode_mtu(3), b"3\0");
        assert_eq!(decode_mtu(b"3\0"), Some(3));
        assert_eq!(decode_mtu(b"9\0"), None);
        assert_eq!(CYCLE_BUFFER.to_be_bytes(), [0, 0, 0x10, 0]);
    }

    #[test]
    fn reports_travel_big_endian_and_print_as_perftest() {
        let r = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1234.5,
            bw_avg: 1200.25,
            msg_rate: 0.0192,
        };
        let p = r.pieces();
        assert_eq!(p[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(p[1], 5000u64.to_be_bytes());
        // hton_double: the IEEE bits byte-swapped on a little-endian host.
        let mut swapped = 1234.5f64.to_le_bytes();
        swapped.reverse();
        assert_eq!(p[2], swapped);
        assert_eq!(BwReport::from_pieces(&p), r);
        // printf(REPORT_FMT, ...): " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t     %-7.6lf"
        assert_eq!(
            r.line(),
            " 65536      5000             1234.50            1200.25\t\t     0.019200"
        );
    }

    #[test]
    fn address_lines_read_as_perftests() {
        assert_eq!(
            address_lines("local", Test::ReadBw, &dest()),
            " local address: LID 0000 QPN 0x0011 PSN 0x5a3c1f OUT 0x10 RKey 0x000201 VAddr 0x00000000010000\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:82:00:02"
        );
        assert!(address_lines("remote", Test::WriteBw, &dest())
            .starts_with(" remote address: LID 0000 QPN 0x0011 PSN 0x5a3c1f RKey 0x000201 VAddr"));
    }

    #[test]
    fn buffers_are_walked_as_perftest_walks_them() {
        // 64 KiB messages: one slot; the buffer is the message.
        assert_eq!(slot_offsets(65536, 4096, 64, 5000), vec![0]);
        assert_eq!(region_len(65536, 4096), 65536);
        // 2 KiB is half a page: two slots.
        assert_eq!(slot_offsets(2048, 4096, 64, 5000), vec![0, 2048]);
        // 100 bytes round up to 128: 32 slots in a page, fewer if fewer messages.
        assert_eq!(slot_offsets(100, 4096, 64, 5000).len(), 32);
        assert_eq!(slot_offsets(100, 4096, 64, 5), vec![0, 128, 256, 384, 512]);
        assert_eq!(slot_offsets(2, 4096, 64, 5000)[1], 64);
        assert_eq!(region_len(2, 4096), 4096);
    }

    #[test]
    fn gid_types_as_perftest_compares_them() {
        assert!(v4_mapped(&GID));
        let mut v6 = GID;
        v6[0] = 0xfe;
        v6[1] = 0x80;
        assert!(!v4_mapped(&v6));
        let mut mc = GID;
        mc[..4].copy_from_slice(&[0xff, 0x0e, 0, 0]);
        assert!(v4_mapped(&mc));
    }

    #[test]
    fn c_hex_prints_zero_without_a_prefix() {
        assert_eq!(c_alt_hex(0, 4), "0000");
        assert_eq!(c_alt_hex(0x11, 6), "0x0011");
        assert_eq!(c_alt_hex(0x5a3c1f, 6), "0x5a3c1f");
    }
}
