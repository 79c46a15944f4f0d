//! The send side (docs/hardware-interface.md §15.3): frames the driver posted on its send
//! queues, checked and handed to the switch as they are.

use rnic_abi::eth::{self, desc_error, desc_status};
use vm_memory::{Bytes, GuestAddress};

use super::ring::Ring;
use super::{EthState, Station};
use crate::fabric::frame::Frame;
use crate::rdma::env::Env;

/// Most frames one send queue sends in one turn of the function: a queue's turn is
/// bounded, as an RDMA queue's is, so one busy driver cannot hold the engine thread.
pub const BUDGET: usize = 64;

/// One frame's descriptors, as found on the ring.
enum Found {
    /// `descs` descriptors making one frame of `len` bytes.
    Frame { descs: u32, len: u32 },
    /// `descs` descriptors that cannot make a frame.
    Malformed { descs: u32 },
    /// The frame's last descriptor is not posted yet.
    Incomplete,
    /// The ring cannot be read.
    Broken,
}

impl EthState {
    /// Sends what the driver posted on the function's send queues, up to [`BUDGET`]
    /// frames each, into `out`; returns whether any descriptor was taken.
    /// Frame buffers come from `spare` where it has some.
    pub fn transmit(
        &mut self,
        env: &Env,
        sender: &Station,
        out: &mut Vec<Frame>,
        spare: &mut Vec<Vec<u8>>,
    ) -> bool {
        let mut progress = false;
        let mtu = self.mtu;
        for ring in self.tx.iter_mut().flatten() {
            let was_broken = ring.broken;
            for _ in 0..BUDGET {
                let Some(avail) = ring.outstanding(env.doorbells) else {
                    break;
                };
                if avail == 0 {
                    break;
                }
                let (descs, error) = match find_frame(ring, env, avail) {
                    Found::Frame { descs, len } => {
                        let error = send_one(ring, env, sender, (descs, len), mtu, out, spare);
                        (descs, error)
                    }
                    Found::Malformed { descs } => (descs, desc_error::MALFORMED),
                    Found::Incomplete | Found::Broken => break,
                };
                let status = desc_status(error);
                if !(0..descs).all(|k| ring.write_back(env.w, k, None, status)) {
                    break;
                }
                ring.complete(descs);
                progress = true;
                count(&mut self.counters, ring, error, out.last());
            }
            if ring.broken && !was_broken {
                self.counters.ring_errors += 1;
            }
        }
        progress
    }
}

/// The descriptors of the next frame of `ring`, of which `avail` are posted.
fn find_frame(ring: &mut Ring, env: &Env, avail: u32) -> Found {
    let mut len = 0u32;
    let mut malformed = false;
    for k in 0..avail {
        let Some(d) = ring.descriptor(env.w, k) else {
            return Found::Broken;
        };
        if d.len == 0 || d.flags & !eth::TX_MORE != 0 {
            malformed = true;
        }
        len = len.saturating_add(d.len);
        let descs = k + 1;
        if d.flags & eth::TX_MORE == 0 {
            return if malformed || descs > eth::TX_MAX_DESCS {
                Found::Malformed { descs }
            } else {
                Found::Frame { descs, len }
            };
        }
        if descs == eth::TX_MAX_DESCS {
            // Too many for one frame, whatever follows: all of them go back as one error.
            return Found::Malformed { descs };
        }
    }
    Found::Incomplete
}

/// Checks and sends the frame of the next `descs` descriptors, `len` bytes, built in a
/// buffer of `spare`; returns the error its descriptors carry back.
fn send_one(
    ring: &mut Ring,
    env: &Env,
    sender: &Station,
    (descs, len): (u32, u32),
    mtu: u32,
    out: &mut Vec<Frame>,
    spare: &mut Vec<Vec<u8>>,
) -> u8 {
    if !(eth::MIN_FRAME..=eth::max_frame(mtu)).contains(&len) {
        return desc_error::MALFORMED;
    }
    let mut bytes = spare.pop().unwrap_or_default();
    bytes.clear();
    bytes.resize(len as usize, 0);
    let mut at = 0usize;
    for k in 0..descs {
        let Some(d) = ring.descriptor(env.w, k) else {
            return desc_error::DMA;
        };
        let n = d.len as usize;
        if env
            .r
            .read_slice(&mut bytes[at..at + n], GuestAddress(d.addr))
            .is_err()
        {
            return desc_error::DMA;
        }
        at += n;
    }
    if sender.policy.spoof_check && spoofed(&bytes, sender) {
        return desc_error::SPOOFED;
    }
    if !sender.link_up {
        return desc_error::LINK_DOWN;
    }
    out.push(Frame::sealed(bytes));
    desc_error::NONE
}

/// Whether `frame` claims to be from someone else: another source MAC, or, for RoCEv2,
/// a source IPv4 address that is neither the function's nor in its GID table (an RDMA
/// peer knows a function by its GIDs, §15.6).
fn spoofed(frame: &[u8], sender: &Station) -> bool {
    let own_ip = |ip: [u8; 4]| ip == sender.ip || sender.gids.holds(ip);
    frame[6..12] != sender.mac
        || crate::fabric::route::is_roce(frame)
            && !frame
                .get(26..30)
                .and_then(|ip| ip.try_into().ok())
                .is_some_and(own_ip)
}

/// Counts a frame that went out (the last of `out`) or failed with `error`.
fn count(c: &mut rnic_abi::eth::EthCounters, ring: &mut Ring, error: u8, sent: Option<&Frame>) {
    if error == desc_error::NONE {
        let bytes = sent.map_or(0, |f| f.bytes.len() as u64);
        c.tx_frames += 1;
        c.tx_bytes += bytes;
        ring.stats.frames += 1;
        ring.stats.bytes += bytes;
        return;
    }
    ring.stats.errors += 1;
    match error {
        desc_error::MALFORMED => c.tx_malformed += 1,
        desc_error::DMA => c.tx_dma_errors += 1,
        desc_error::SPOOFED => c.tx_spoofed += 1,
        _ => c.tx_link_down += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_abi::gid::{mapped, SetGidReq, GID_VALID};

    const MAC: [u8; 6] = [2, 0x52, 10, 82, 0, 2];
    const OWN: [u8; 4] = [10, 82, 0, 2];

    /// A RoCEv2 frame (Ethernet, IPv4, UDP to 4791) from `mac` and `ip`.
    fn roce_from(mac: [u8; 6], ip: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[6..12].copy_from_slice(&mac);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 17;
        f[26..30].copy_from_slice(&ip);
        f[36..38].copy_from_slice(&crate::roce::hdr::ROCEV2_PORT.to_be_bytes());
        f
    }

    #[test]
    fn a_roce_frame_may_come_from_the_function_s_address_or_its_gid_table_s() {
        let mut station = Station {
            mac: MAC,
            ip: OWN,
            link_up: true,
            policy: crate::eth::Policy::VF,
            msix_vectors: 16,
            gids: Default::default(),
        };
        let other = [192, 168, 5, 1];
        assert!(!spoofed(&roce_from(MAC, OWN), &station));
        assert!(spoofed(&roce_from(MAC, other), &station));
        assert!(spoofed(&roce_from([2, 0, 0, 0, 0, 9], OWN), &station));
        let req = SetGidReq {
            index: 1,
            flags: GID_VALID,
            gid: mapped(other),
            ..SetGidReq::default()
        };
        station.gids.set(&req, OWN, false, |_| false).unwrap();
        assert!(!spoofed(&roce_from(MAC, other), &station));
        assert!(spoofed(&roce_from(MAC, [192, 168, 5, 2]), &station));
    }
}
