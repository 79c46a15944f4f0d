//! Two connected RC QPs on two functions of one rnicd, driven through the host transport.

use std::sync::Arc;

use rnic_driver::transport::vfio_user::VfioUserTransport;
use rnic_driver::transport::Transport;
use rnic_driver::verbs::{self, mtu, Context, Cq, Mr, Pd, Qp, QpCaps};
use rnic_driver::Device;
use rnic_tools::features;

/// Everything one side of a connection holds.
pub struct Side {
    /// The QP (dropped first: it uses the rest).
    pub qp: Qp,
    /// A registered buffer.
    pub mr: Mr,
    /// Send and receive completions.
    pub cq: Cq,
    /// The protection domain.
    pub pd: Pd,
    /// The device context.
    pub ctx: Context,
    /// The function's GID.
    pub gid: [u8; 16],
}

/// Options of a pair.
#[derive(Debug, Clone, Copy)]
pub struct PairOptions {
    /// Bytes of each side's registered buffer.
    pub buf_len: usize,
    /// Access flags of the buffers (and of the QPs).
    pub access: u32,
    /// Path MTU code.
    pub mtu: u8,
    /// Queue depths.
    pub caps: QpCaps,
    /// ACK timeout code.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7: forever).
    pub rnr_retry: u8,
    /// RNR NAK timer code the responders advertise.
    pub min_rnr_timer: u8,
    /// READs and atomics each requester keeps outstanding at once.
    pub max_rd_atomic: u8,
    /// Scattered DMA memory ([`rnic_driver::transport::vfio_user::VfioUserOptions::scatter`]):
    /// no page of a buffer follows the one before it in device memory.
    pub scatter: bool,
}

impl Side {
    /// This side as the feature scenarios take it ([`features::Endpoint`]).
    pub fn endpoint(&self) -> features::Endpoint<'_> {
        features::Endpoint {
            ctx: &self.ctx,
            pd: &self.pd,
            cq: &self.cq,
            mr: &self.mr,
            gid: self.gid,
        }
    }
}

impl Default for PairOptions {
    fn default() -> Self {
        Self {
            buf_len: 1 << 20,
            access: verbs::ACCESS_LOCAL_WRITE
                | verbs::ACCESS_REMOTE_WRITE
                | verbs::ACCESS_REMOTE_READ
                | verbs::ACCESS_REMOTE_ATOMIC,
            mtu: mtu::MTU_1024,
            caps: QpCaps {
                max_send_wr: 128,
                max_recv_wr: 128,
                max_send_sge: 16,
                max_recv_sge: 16,
                max_inline_data: 128,
            },
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            scatter: false,
        }
    }
}

/// Opens a function and gives it everything one side needs, up to INIT.
pub fn side(socket: &std::path::Path, o: &PairOptions) -> Side {
    let t = VfioUserTransport::connect_with(
        socket,
        &rnic_driver::transport::vfio_user::VfioUserOptions {
            memory: o.buf_len * 2 + (16 << 20),
            scatter: o.scatter,
            ..Default::default()
        },
    )
    .expect("connect");
    let buf = Arc::new(t.alloc_dma(o.buf_len).expect("buffer"));
    let device = Device::open(Box::new(t)).expect("open");
    let ctx = Context::new(device).expect("context");
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(1024).expect("cq");
    let mr = pd.reg_mr(buf, 0, o.buf_len, o.access).expect("mr");
    let qp = pd.create_qp(&cq, &cq, o.caps, false).expect("qp");
    let (a, m) = verbs::init_attr(o.access & !verbs::ACCESS_LOCAL_WRITE);
    qp.modify(&a, m).expect("INIT");
    let gid = ctx.attr().gid;
    Side {
        qp,
        mr,
        cq,
        pd,
        ctx,
        gid,
    }
}

/// Connects `a` and `b` (RTR, then RTS), with send PSNs `psn_a` and `psn_b`.
pub fn connect(a: &Side, b: &Side, o: &PairOptions, psn_a: u32, psn_b: u32) {
    connect_qps((&a.qp, a.gid), (&b.qp, b.gid), o, psn_a, psn_b);
}

/// Moves `qp` (in INIT) to RTR, receiving from `peer` (its QP and GID), whose first PSN is
/// `peer_psn`.
pub fn to_rtr(qp: &Qp, peer: (&Qp, [u8; 16]), o: &PairOptions, peer_psn: u32) {
    let (at, m) = verbs::rtr_attr(
        peer.0.qp_num(),
        peer.1,
        peer_psn,
        o.mtu,
        16,
        o.min_rnr_timer,
    );
    qp.modify(&at, m).expect("RTR");
}

/// Moves `qp` (in RTR) to RTS, sending from PSN `psn`.
pub fn to_rts(qp: &Qp, o: &PairOptions, psn: u32) {
    let (at, m) = verbs::rts_attr(psn, o.timeout, o.retry_cnt, o.rnr_retry, o.max_rd_atomic);
    qp.modify(&at, m).expect("RTS");
}

/// Connects two QPs in INIT (each with its function's GID): both to RTR, then to RTS.
pub fn connect_qps(
    a: (&Qp, [u8; 16]),
    b: (&Qp, [u8; 16]),
    o: &PairOptions,
    psn_a: u32,
    psn_b: u32,
) {
    for (me, peer, my_psn, peer_psn) in [(a, b, psn_a, psn_b), (b, a, psn_b, psn_a)] {
        to_rtr(me.0, peer, o, peer_psn);
        to_rts(me.0, o, my_psn);
    }
}

/// A QP of `side`'s PD whose completions go to `cq`, moved to INIT with `access`.
pub fn init_qp(side: &Side, cq: &Cq, o: &PairOptions, access: u32) -> Qp {
    let qp = side.pd.create_qp(cq, cq, o.caps, false).expect("qp");
    let (a, m) = verbs::init_attr(access);
    qp.modify(&a, m).expect("INIT");
    qp
}

/// Registers `len` bytes in the middle of a fresh guarded buffer of `side`
/// ([`rnic_tools::features::guarded_mr`]).
pub fn guarded_mr(side: &Side, pd: &Pd, guard: usize, len: usize, access: u32, fill: u8) -> Mr {
    features::guarded_mr(&side.ctx, pd, guard, len, access, fill).expect("guarded mr")
}

pub use rnic_tools::features::{buffer_bytes, poll_n, read_mr, signaled};

/// Two connected sides on functions `a` and `b` of `rnicd`.
pub fn pair(rnicd: &crate::Rnicd, a: &str, b: &str, o: &PairOptions) -> (Side, Side) {
    let sa = side(&rnicd.socket(a), o);
    let sb = side(&rnicd.socket(b), o);
    connect(&sa, &sb, o, 0x100, 0xabc000);
    (sa, sb)
}

/// Deterministic test bytes: the same `seed` gives the same bytes.
pub use rnic_tools::perf::pattern;

/// The little-endian u64 at `offset` of `mr`.
pub fn read_u64(mr: &Mr, offset: usize) -> u64 {
    let mut b = [0u8; 8];
    mr.read(offset, &mut b);
    u64::from_le_bytes(b)
}
