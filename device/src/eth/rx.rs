//! The receive side (docs/hardware-interface.md §15.4): which frames that reach the
//! function are the operating system's, and how each lands in the next posted buffer.

use rnic_abi::eth::{self, desc_error, desc_status};
use vm_memory::{Bytes, GuestAddress};

use super::{EthState, Station};
use crate::rdma::env::Env;

/// The broadcast MAC.
const BROADCAST: [u8; 6] = [0xff; 6];

impl EthState {
    /// Receives `frame` (not RoCEv2) for the function `station` describes: into the
    /// receive queue's next buffer if reception is on and the receive mode takes it, else
    /// dropped and counted. Returns whether it was received.
    pub fn receive(&mut self, env: &Env, station: &Station, frame: &[u8]) -> bool {
        let (mac, policy) = (station.mac, station.policy);
        let receives = self.receives();
        let mode = self.effective_rx_mode(policy);
        let c = &mut self.counters;
        if !receives {
            c.rx_disabled += 1;
            return false;
        }
        let Some(dst) = frame.get(..6) else {
            c.rx_filtered += 1;
            return false;
        };
        let wanted = mode & eth::RX_PROMISC != 0
            || dst == mac
            || dst == BROADCAST
            || dst[0] & 1 != 0
                && (mode & eth::RX_ALLMULTI != 0 || self.multicast.iter().any(|m| m == dst));
        if !wanted {
            c.rx_filtered += 1;
            return false;
        }
        if frame.len() as u32 > eth::max_frame(self.mtu) {
            c.rx_too_long += 1;
            return false;
        }
        let Some(ring) = self.rx.as_mut() else {
            c.rx_disabled += 1;
            return false;
        };
        let was_broken = ring.broken;
        let outcome = (|| {
            let avail = ring.outstanding(env.doorbells)?;
            if avail == 0 {
                return Some(Err(Drop::NoBuffer));
            }
            let d = ring.descriptor(env.w, 0)?;
            if (d.len as usize) < frame.len() {
                return Some(Err(Drop::TooLong));
            }
            if env.w.write_slice(frame, GuestAddress(d.addr)).is_err() {
                return Some(Err(Drop::Dma));
            }
            ring.write_back(
                env.w,
                0,
                Some(frame.len() as u32),
                desc_status(desc_error::NONE),
            )
            .then_some(Ok(()))
        })();
        if ring.broken && !was_broken {
            c.ring_errors += 1;
        }
        match outcome {
            Some(Ok(())) => {
                ring.complete(1);
                ring.stats.frames += 1;
                ring.stats.bytes += frame.len() as u64;
                c.rx_frames += 1;
                c.rx_bytes += frame.len() as u64;
                true
            }
            Some(Err(why)) => {
                ring.stats.errors += 1;
                match why {
                    Drop::NoBuffer => c.rx_no_buffer += 1,
                    Drop::TooLong => c.rx_too_long += 1,
                    Drop::Dma => c.rx_dma_errors += 1,
                }
                false
            }
            None => {
                c.rx_dma_errors += 1;
                false
            }
        }
    }
}

/// Why a frame the receive mode took found no place.
enum Drop {
    NoBuffer,
    TooLong,
    Dma,
}
