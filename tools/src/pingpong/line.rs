//! rnic-pingpong's line format: what one side tells the other ([`Dest`]), as TCP lines,
//! as the `--peer QPN:GID:PSN[:RKEY:ADDR]` argument (hex) and as the `local:` / `remote:`
//! lines scripts read. GIDs are in rnic's one grammar ([`rnic_abi::gid`]). The lines:
//!
//! ```text
//! LLLL:QQQQQQ:PPPPPP:GGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGG\n   lid, QPN, PSN, GID (hex)
//! RRRRRRRR:AAAAAAAAAAAAAAAA\n                             rkey, address (write/read only)
//! done\n                                                  client to server, last
//! ```
//!
//! The first line is `ibv_rc_pingpong`'s own message: `format!("{lid:04x}:{qpn:06x}:
//! {psn:06x}:{gid}")` with the GID as 32 hex digits in wire order (lid is always 0 here)
//! plus a newline, 52 bytes like `ibv_rc_pingpong`'s NUL-terminated one; a reader accepts
//! NUL as well as a newline as the end of a line, and `done\n` is as long as
//! `ibv_rc_pingpong`'s `"done"` with its NUL, so `--op send` can interoperate with it.

use std::io::BufRead;

use rnic_abi::gid;

use super::Op;
use crate::error::{fail, Result, ToolError};
use crate::rendezvous::read_token;

/// The rkey and address of a side's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Remote key.
    pub rkey: u32,
    /// Address of the first byte, as work requests name it (the MR's iova).
    pub addr: u64,
}

/// What one side tells the other: `ibv_rc_pingpong`'s `struct pingpong_dest`, plus the
/// buffer for WRITEs and READs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// InfiniBand LID (0: RoCE has none).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN the side sends (24 bits).
    pub psn: u32,
    /// The function's GID.
    pub gid: [u8; 16],
    /// The buffer the peer may write or read.
    pub buf: Option<RemoteBuf>,
}

/// Parses a GID in a line or a `--peer` argument.
fn parse_gid(s: &str) -> Result<[u8; 16]> {
    gid::parse(s).map_err(|e| ToolError(format!("GID {s:?}: {e}")))
}

/// Splits at colons, except inside brackets (a GID in IPv6 notation).
fn split_fields(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ':' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// Parses a hex number with an optional `0x`, no wider than `bits`.
fn parse_hex(s: &str, bits: u32, what: &str) -> Result<u64> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    let v = u64::from_str_radix(digits, 16)
        .map_err(|_| ToolError(format!("{what} {s:?} is not a hex number")))?;
    if bits < 64 && v >> bits != 0 {
        return fail(format!("{what} {s:?} is wider than {bits} bits"));
    }
    Ok(v)
}

impl Dest {
    /// The first wire line, without its newline: `LLLL:QQQQQQ:PPPPPP:G*32`.
    pub fn line(&self) -> String {
        format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn,
            self.psn,
            gid::hex(&self.gid)
        )
    }

    /// The second wire line, without its newline: `RRRRRRRR:AAAAAAAAAAAAAAAA`.
    pub fn buf_line(&self) -> Option<String> {
        self.buf.map(|b| format!("{:08x}:{:016x}", b.rkey, b.addr))
    }

    /// Parses a first wire line (`LLLL:QQQQQQ:PPPPPP:GID`).
    pub fn parse_line(line: &str) -> Result<Dest> {
        let bad = || {
            ToolError(format!(
                "the peer sent {line:?}, not LLLL:QQQQQQ:PPPPPP:GID (an rnic-pingpong or ibv_rc_pingpong on the other end?)"
            ))
        };
        let f: Vec<&str> = line.trim().split(':').collect();
        let [lid, qpn, psn, gid] = f[..] else {
            return Err(bad());
        };
        Ok(Dest {
            lid: parse_hex(lid, 16, "LID").map_err(|_| bad())? as u16,
            qpn: parse_hex(qpn, 24, "QPN").map_err(|_| bad())? as u32,
            psn: parse_hex(psn, 24, "PSN").map_err(|_| bad())? as u32,
            gid: parse_gid(gid)?,
            buf: None,
        })
    }

    /// Parses a second wire line (`RKEY:ADDR`).
    pub fn parse_buf_line(line: &str) -> Result<RemoteBuf> {
        let bad = || {
            ToolError(format!(
                "the peer sent {line:?}, not RRRRRRRR:AAAAAAAAAAAAAAAA (does it run the same --op?)"
            ))
        };
        let (rkey, addr) = line.trim().split_once(':').ok_or_else(bad)?;
        Ok(RemoteBuf {
            rkey: parse_hex(rkey, 32, "rkey").map_err(|_| bad())? as u32,
            addr: parse_hex(addr, 64, "address").map_err(|_| bad())?,
        })
    }

    /// Parses `--peer QPN:GID:PSN[:RKEY:ADDR]` (hex, `0x` optional; the GID as 32 hex
    /// digits or an IPv6 address in brackets).
    pub fn parse_peer(s: &str) -> Result<Dest> {
        let f = split_fields(s.trim());
        let (qpn, gid, psn, buf) = match f[..] {
            [qpn, gid, psn] => (qpn, gid, psn, None),
            [qpn, gid, psn, rkey, addr] => (qpn, gid, psn, Some((rkey, addr))),
            _ => {
                return fail(format!(
                    "--peer {s:?}: expected QPN:GID:PSN or QPN:GID:PSN:RKEY:ADDR in hex, as the other side's `local:` line prints them"
                ))
            }
        };
        let buf = match buf {
            Some((rkey, addr)) => Some(RemoteBuf {
                rkey: parse_hex(rkey, 32, "--peer rkey")? as u32,
                addr: parse_hex(addr, 64, "--peer address")?,
            }),
            None => None,
        };
        Ok(Dest {
            lid: 0,
            qpn: parse_hex(qpn, 24, "--peer QPN")? as u32,
            psn: parse_hex(psn, 24, "--peer PSN")? as u32,
            gid: parse_gid(gid)?,
            buf,
        })
    }

    /// The `--peer` argument that names this side.
    pub fn peer_arg(&self) -> String {
        let mut s = format!("{:x}:{}:{:x}", self.qpn, gid::hex(&self.gid), self.psn);
        if let Some(b) = self.buf {
            s += &format!(":{:x}:{:x}", b.rkey, b.addr);
        }
        s
    }

    /// The human line: `qpn 0x11 gid ... psn 0x0 [rkey 0x.. addr 0x..]`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "qpn {:#x} gid {} psn {:#x}",
            self.qpn,
            gid::hex(&self.gid),
            self.psn
        );
        if let Some(b) = self.buf {
            s += &format!(" rkey {:#x} addr {:#x}", b.rkey, b.addr);
        }
        s
    }
}

/// This side's lines: the first, and the buffer line for write and read.
pub(super) fn wire_lines(local: &Dest, op: Op) -> String {
    let mut s = local.line() + "\n";
    if op.needs_remote_buffer() {
        s += &(local.buf_line().expect("a local side has a buffer") + "\n");
    }
    s
}

/// Reads the peer's lines.
pub(super) fn read_dest(r: &mut impl BufRead, op: Op) -> Result<Dest> {
    let mut d = Dest::parse_line(&read_token(r, "its QPN, GID and PSN")?)?;
    if op.needs_remote_buffer() {
        d.buf = Some(Dest::parse_buf_line(&read_token(
            r,
            "its rkey and address",
        )?)?);
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pingpong::tests::{dest, GID};
    use std::io::BufReader;

    #[test]
    fn the_first_line_is_ibv_rc_pingpongs_message() {
        let line = dest().line();
        assert_eq!(line, "0000:000011:abcdef:00000000000000000000ffff0a520002");
        // With its newline as long as ibv_rc_pingpong's message with its NUL.
        assert_eq!(
            line.len() + 1,
            "0000:000000:000000:00000000000000000000000000000000\0".len()
        );
        let back = Dest::parse_line(&line).unwrap();
        assert_eq!(
            back,
            Dest {
                buf: None,
                ..dest()
            }
        );
        assert_eq!(dest().buf_line().unwrap(), "00000101:0000000100001000");
        assert_eq!(
            Dest::parse_buf_line("00000101:0000000100001000").unwrap(),
            dest().buf.unwrap()
        );
    }

    #[test]
    fn bad_lines_are_refused_with_the_format() {
        for bad in [
            "",
            "0000:000011:abcdef",
            "0000:000011:abcdef:00ff",
            "0000:1000000:000000:00000000000000000000ffff0a520002",
            "zzzz:000011:abcdef:00000000000000000000ffff0a520002",
        ] {
            let e = Dest::parse_line(bad).unwrap_err();
            assert!(
                e.0.contains("LLLL:QQQQQQ:PPPPPP") || e.0.contains("GID"),
                "{e}"
            );
        }
        assert!(Dest::parse_buf_line("12345").is_err());
    }

    #[test]
    fn wire_lines_carry_the_buffer_for_write_and_read_only() {
        assert_eq!(wire_lines(&dest(), Op::Send).lines().count(), 1);
        let w = wire_lines(&dest(), Op::Write);
        let mut r = BufReader::new(w.as_bytes());
        assert_eq!(read_dest(&mut r, Op::Write).unwrap(), dest());
        let mut r = BufReader::new(w.as_bytes());
        assert_eq!(read_dest(&mut r, Op::Send).unwrap().buf, None);
    }

    #[test]
    fn peer_arguments_parse_in_hex_with_or_without_0x() {
        let d =
            Dest::parse_peer("11:00000000000000000000ffff0a520002:abcdef:101:100001000").unwrap();
        assert_eq!(d, dest());
        assert_eq!(Dest::parse_peer(&dest().peer_arg()).unwrap(), dest());
        let d = Dest::parse_peer("0x11:00000000000000000000FFFF0A520002:0x0\n").unwrap();
        assert_eq!((d.qpn, d.psn, d.gid, d.buf), (0x11, 0, GID, None));
        let d = Dest::parse_peer("11:[::ffff:10.82.0.2]:0").unwrap();
        assert_eq!(d.gid, GID);
        for bad in [
            "11",
            "11:00000000000000000000ffff0a520002",
            "11:00000000000000000000ffff0a520002:0:1",
            "1000000:00000000000000000000ffff0a520002:0",
            "11:00000000000000000000ffff0a52000:0",
            "11:[nonsense]:0",
            "11:00000000000000000000ffff0a520002:0:1:x",
        ] {
            assert!(Dest::parse_peer(bad).is_err(), "{bad}");
        }
        let local = dest().describe();
        assert_eq!(
            local,
            "qpn 0x11 gid 00000000000000000000ffff0a520002 psn 0xabcdef rkey 0x101 addr 0x100001000"
        );
    }
}
