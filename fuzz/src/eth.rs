//! The Ethernet port's side of the eth fuzz target: a segment held in memory, on which the
//! input's frames arrive and the port's frames are kept for the checks.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use rnic_device::net::link::Link;
use rnic_device::roce::build::ones_complement_sum;
use rnic_device::roce::hdr::{ETHERTYPE_IPV4, ETH_HEADER_LEN};

/// Frames in both directions, shared between the port (as its [`Link`]) and the target.
#[derive(Default, Clone)]
pub struct Segment {
    to_port: Arc<Mutex<VecDeque<Vec<u8>>>>,
    from_port: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Segment {
    /// Puts a frame on the segment for the port to read on its next pass.
    pub fn push(&self, frame: Vec<u8>) {
        self.to_port
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(frame);
    }

    /// The frames the port sent so far.
    pub fn sent(&self) -> Vec<Vec<u8>> {
        self.from_port
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Link for Segment {
    fn fd(&self) -> RawFd {
        // Never watched: the target runs the engine itself.
        -1
    }

    fn send(&mut self, frame: &[u8]) -> std::io::Result<()> {
        self.from_port
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(frame.to_vec());
        Ok(())
    }

    fn recv(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        match self
            .to_port
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
        {
            Some(f) => {
                *out = f;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn describe(&self) -> String {
        "fuzz segment".into()
    }
}

/// Makes the IPv4 header checksum of an Ethernet frame right again (after a mutation), so
/// that the checks after it see the frame; anything that is not IPv4 with a whole header
/// is left as it is.
pub fn fix_ipv4_checksum(frame: &mut [u8]) {
    let is_ipv4 = frame.get(12..14) == Some(&ETHERTYPE_IPV4.to_be_bytes()[..]);
    let Some(&ver_ihl) = frame.get(ETH_HEADER_LEN) else {
        return;
    };
    let end = ETH_HEADER_LEN + usize::from(ver_ihl & 0xf) * 4;
    if !is_ipv4 || end < ETH_HEADER_LEN + 20 || end > frame.len() {
        return;
    }
    frame[ETH_HEADER_LEN + 10..ETH_HEADER_LEN + 12].fill(0);
    let c = !ones_complement_sum(0, &frame[ETH_HEADER_LEN..end]);
    frame[ETH_HEADER_LEN + 10..ETH_HEADER_LEN + 12].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_header_sums_to_all_ones() {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[22] = 64;
        f[26..30].copy_from_slice(&[10, 82, 1, 5]);
        fix_ipv4_checksum(&mut f);
        assert_eq!(ones_complement_sum(0, &f[14..34]), 0xffff);
        // Not IPv4: untouched.
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        arp[24..26].fill(0);
        let before = arp.clone();
        fix_ipv4_checksum(&mut arp);
        assert_eq!(arp, before);
    }
}
