//! A function's Ethernet queues (docs/hardware-interface.md §15): the NIC beside the RDMA
//! engine. Its send queues give the switch whole frames the driver built
//! ([`tx`]); frames for the function that are not RoCEv2 come to its receive queue
//! ([`rx`]), filtered by its receive mode. The commands that create and set them up are
//! here; the rings themselves in [`ring`].

pub mod ring;
pub mod rx;
pub mod tx;

use std::time::{Duration, Instant};

use rnic_abi::cmd::{Opcode, Status};
use rnic_abi::eth::{self, CreateEthQueueReq, CreateEthQueueResp, EthCounters, EthQueueReq};
use rnic_abi::eth::{MacEntry, QueryEthResp, SetEthReq};
use rnic_abi::regs::NO_VECTOR;
use rnic_abi::verbs::DoorbellSlot;
use zerocopy::{FromBytes, IntoBytes};

use crate::rdma::env::Env;
use crate::rdma::error::VerbsError;
use crate::rdma::mkey::pages::PagedBuffer;
use crate::rdma::RdmaState;
use ring::Ring;

/// What the PF decided about a function's Ethernet traffic (`SET_VF_ETH`, §15.6); it
/// survives the function's resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Frames from any source MAC but the function's are dropped.
    pub spoof_check: bool,
    /// The function may receive promiscuously or all multicast.
    pub trusted: bool,
}

impl Policy {
    /// The PF's: trusted, unchecked.
    pub const PF: Self = Self {
        spoof_check: false,
        trusted: true,
    };
    /// A VF's until its PF says otherwise: checked, not trusted.
    pub const VF: Self = Self {
        spoof_check: true,
        trusted: false,
    };
}

/// What the Ethernet side needs to know of its function besides its own state: the
/// function as an Ethernet station.
#[derive(Debug, Clone, Copy)]
pub struct Station {
    /// The function's MAC.
    pub mac: [u8; 6],
    /// The function's IPv4 address (its GID's): RoCEv2 frames its driver sends must come
    /// from it, or from an address of its GID table, while the PF checks sources (§15.6).
    pub ip: [u8; 4],
    /// Its GID table (§6.13).
    pub gids: crate::gid_table::GidTable,
    /// Whether its link is up.
    pub link_up: bool,
    /// What its PF decided.
    pub policy: Policy,
    /// Its MSI-X vectors.
    pub msix_vectors: u16,
}

/// The function's Ethernet queues, settings and counters.
#[derive(Debug)]
pub struct EthState {
    tx: Vec<Option<Ring>>,
    rx: Option<Ring>,
    mtu: u32,
    rx_mode: u32,
    multicast: Vec<[u8; 6]>,
    event_vector: Option<u16>,
    /// The function's counters since its last reset.
    pub counters: EthCounters,
}

impl Default for EthState {
    fn default() -> Self {
        Self {
            tx: (0..eth::MAX_TX_QUEUES).map(|_| None).collect(),
            rx: None,
            mtu: eth::DEFAULT_MTU,
            rx_mode: 0,
            multicast: Vec::new(),
            event_vector: None,
            counters: EthCounters::default(),
        }
    }
}

/// A queue's number in the doorbell slot space of [`RdmaState::alloc_eth_slot`].
fn slot_id(kind: u8, queue: u32) -> u32 {
    u32::from(kind) << 8 | queue
}

fn bad(syndrome: u32) -> VerbsError {
    VerbsError::new(Status::BadParam, syndrome)
}

impl EthState {
    /// Runs an Ethernet command (`CREATE_ETH_QUEUE` to `QUERY_ETH_QUEUE`) for the
    /// function `station` describes, whose doorbell slots are `rdma`'s.
    pub fn execute(
        &mut self,
        op: Opcode,
        body: &[u8],
        rdma: &mut RdmaState,
        env: &Env,
        station: &Station,
    ) -> Result<Vec<u8>, VerbsError> {
        match op {
            Opcode::CreateEthQueue => {
                let req = CreateEthQueueReq::read_from_bytes(body)
                    .map_err(|_| VerbsError::new(Status::Malformed, 0))?;
                self.create(&req, rdma, env, station.msix_vectors)
                    .map(|r| r.as_bytes().to_vec())
            }
            Opcode::DestroyEthQueue => {
                let req = queue_req(body)?;
                let slot = self.queue(req.kind, req.queue)?;
                *slot = None;
                rdma.free_eth_slot(slot_id(req.kind, req.queue));
                Ok(Vec::new())
            }
            Opcode::SetEth => self.set(body, station.msix_vectors).map(|()| Vec::new()),
            Opcode::QueryEth => {
                if !body.is_empty() {
                    return Err(bad(0));
                }
                let mut flags = 0;
                if station.link_up {
                    flags |= eth::ETH_LINK_UP;
                }
                if station.policy.trusted {
                    flags |= eth::ETH_TRUSTED;
                }
                if station.policy.spoof_check {
                    flags |= eth::ETH_SPOOF_CHECKED;
                }
                let resp = QueryEthResp {
                    mac: station.mac,
                    reserved: 0,
                    flags,
                    mtu: self.mtu,
                    rx_mode: self.effective_rx_mode(station.policy),
                    max_mtu: eth::MAX_MTU,
                    counters: self.counters,
                };
                Ok(resp.as_bytes().to_vec())
            }
            Opcode::QueryEthQueue => {
                let req = queue_req(body)?;
                let ring = self.queue(req.kind, req.queue)?;
                let ring = ring
                    .as_ref()
                    .ok_or(VerbsError::new(Status::NotFound, req.queue))?;
                Ok(ring.stats.as_bytes().to_vec())
            }
            _ => Err(VerbsError::new(Status::BadOpcode, op as u32)),
        }
    }

    fn create(
        &mut self,
        req: &CreateEthQueueReq,
        rdma: &mut RdmaState,
        env: &Env,
        msix_vectors: u16,
    ) -> Result<CreateEthQueueResp, VerbsError> {
        if req.reserved0 != 0 {
            return Err(bad(1));
        }
        if !req.entries.is_power_of_two()
            || !(eth::MIN_ENTRIES..=eth::MAX_ENTRIES).contains(&req.entries)
        {
            return Err(bad(4));
        }
        if req.moderation_usecs > eth::MAX_MODERATION_USECS {
            return Err(bad(12));
        }
        let vector = vector_of(req.msix_vector, msix_vectors, 2)?;
        let queue = match req.kind {
            eth::KIND_TX => self.tx.iter().position(Option::is_none),
            eth::KIND_RX => self.rx.is_none().then_some(0),
            _ => return Err(bad(0)),
        }
        .ok_or(VerbsError::new(Status::NoResources, u32::from(req.kind)))?
            as u32;
        let bytes = u64::from(req.entries) * size_of::<eth::EthDesc>() as u64;
        // The device writes descriptors back: the ring must be writable.
        let buffer = PagedBuffer::load(&req.ring, 0, bytes, env.w)
            .map_err(|_| VerbsError::new(Status::DmaError, 0))?;
        let (page, slot) = rdma.alloc_eth_slot(req.doorbell_page, slot_id(req.kind, queue))?;
        let offset = rnic_abi::doorbell::slot_offset(page, slot);
        env.doorbells.write32(offset, 0);
        env.doorbells.write32(offset + 4, 0);
        let ring = Ring::new(
            buffer,
            req.entries,
            offset,
            vector,
            Duration::from_micros(u64::from(req.moderation_usecs)),
        );
        match req.kind {
            eth::KIND_TX => self.tx[queue as usize] = Some(ring),
            _ => self.rx = Some(ring),
        }
        Ok(CreateEthQueueResp {
            queue,
            reserved: 0,
            doorbell: DoorbellSlot { page, slot },
        })
    }

    fn set(&mut self, body: &[u8], msix_vectors: u16) -> Result<(), VerbsError> {
        let (req, rest) =
            SetEthReq::read_from_prefix(body).map_err(|_| VerbsError::new(Status::Malformed, 0))?;
        if !(eth::MIN_MTU..=eth::MAX_MTU).contains(&req.mtu) {
            return Err(bad(0));
        }
        if req.rx_mode & !(eth::RX_ENABLE | eth::RX_PROMISC | eth::RX_ALLMULTI) != 0 {
            return Err(bad(4));
        }
        let event_vector = vector_of(req.event_vector, msix_vectors, 8)?;
        if req.reserved != 0 {
            return Err(bad(10));
        }
        if req.mc_count > eth::MAX_MULTICAST
            || rest.len() != req.mc_count as usize * size_of::<MacEntry>()
        {
            return Err(bad(12));
        }
        let entries = <[MacEntry]>::ref_from_bytes(rest).map_err(|_| bad(12))?;
        let mut multicast = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            if e.mac[0] & 1 == 0 || e.reserved != 0 {
                return Err(bad(16 + 8 * i as u32));
            }
            multicast.push(e.mac);
        }
        self.mtu = req.mtu;
        self.rx_mode = req.rx_mode;
        self.multicast = multicast;
        self.event_vector = event_vector;
        Ok(())
    }

    fn queue(&mut self, kind: u8, queue: u32) -> Result<&mut Option<Ring>, VerbsError> {
        let missing = VerbsError::new(Status::NotFound, queue);
        let slot = match kind {
            eth::KIND_TX => self.tx.get_mut(queue as usize).ok_or(missing)?,
            eth::KIND_RX if queue == 0 => &mut self.rx,
            eth::KIND_RX => return Err(missing),
            _ => return Err(bad(0)),
        };
        if slot.is_none() {
            return Err(missing);
        }
        Ok(slot)
    }

    /// The receive mode in effect: what the driver asked, less what `policy` forbids.
    pub fn effective_rx_mode(&self, policy: Policy) -> u32 {
        if policy.trusted {
            self.rx_mode
        } else {
            self.rx_mode & !(eth::RX_PROMISC | eth::RX_ALLMULTI)
        }
    }

    /// Whether the operating system receives the function's frames (and answers ARP for
    /// it): reception is enabled and a receive queue exists.
    pub fn receives(&self) -> bool {
        self.rx_mode & eth::RX_ENABLE != 0 && self.rx.is_some()
    }

    /// The vector to signal for a link or address change, if the driver gave one.
    pub fn event_vector(&self) -> Option<u16> {
        self.event_vector
    }

    /// The vectors of queues whose interrupt is due at `now`, each once; `deadline`
    /// learns when a held-back one may fire.
    pub fn interrupts(
        &mut self,
        env: &Env,
        now: Instant,
        deadline: &mut Option<Instant>,
    ) -> Vec<u16> {
        let mut vectors = Vec::new();
        let rings = self.tx.iter_mut().flatten().chain(self.rx.as_mut());
        for ring in rings {
            if let Some(v) = ring.interrupt_due(env.doorbells, now, deadline) {
                if !vectors.contains(&v) {
                    vectors.push(v);
                }
            }
        }
        self.counters.interrupts += vectors.len() as u64;
        vectors
    }

    /// Whether the function has any Ethernet queue.
    pub fn is_active(&self) -> bool {
        self.rx.is_some() || self.tx.iter().any(Option::is_some)
    }
}

fn queue_req(body: &[u8]) -> Result<EthQueueReq, VerbsError> {
    let req =
        EthQueueReq::read_from_bytes(body).map_err(|_| VerbsError::new(Status::Malformed, 0))?;
    if req.reserved0 != [0; 3] {
        return Err(bad(1));
    }
    Ok(req)
}

/// A vector field: `NO_VECTOR`, or one of the function's `vectors`; `syndrome` is the
/// field's offset.
fn vector_of(value: u16, vectors: u16, syndrome: u32) -> Result<Option<u16>, VerbsError> {
    if u32::from(value) == NO_VECTOR {
        Ok(None)
    } else if value < vectors {
        Ok(Some(value))
    } else {
        Err(bad(syndrome))
    }
}
