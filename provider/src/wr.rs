//! The `ibv_wr_*` work-request API of extended QPs (`ibv_qp_ex`, created with
//! `send_ops_flags`): the builders collect the work requests of a batch as `ibv_send_wr`s
//! with their own SGEs and inline data, and `ibv_wr_complete` posts them as
//! `ibv_post_send` would (the same WQEs, doorbell and accounting). A builder returns
//! nothing: an error (a builder before a work request, too many SGEs) is kept and
//! `ibv_wr_complete` returns it, posting nothing.

use std::ffi::c_int;
use std::ptr::null_mut;

use rnic_verbs_abi::*;

/// The operations a QP of rnic's can be created with (`send_ops_flags`).
pub const SUPPORTED_SEND_OPS: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_FLUSH
    | IBV_QP_EX_WITH_ATOMIC_WRITE;

/// One work request of a batch and what its `sg_list` points to when posted.
struct Wr {
    wr: ibv_send_wr,
    sges: Vec<ibv_sge>,
    /// Inline data, copied when the application gives it (its buffers may go after the
    /// call); `sges` then name these buffers.
    inline: Vec<Vec<u8>>,
}

/// The work requests between `ibv_wr_start` and `ibv_wr_complete`.
#[derive(Default)]
pub struct Batch {
    wrs: Vec<Wr>,
    error: Option<c_int>,
}

impl Batch {
    /// Starts a work request of `opcode` with the QP's `wr_id` and `wr_flags`.
    pub fn begin(&mut self, qpx: &ibv_qp_ex, opcode: ibv_wr_opcode) -> Option<&mut ibv_send_wr> {
        if self.error.is_some() {
            return None;
        }
        let mut wr = ibv_send_wr::zeroed();
        wr.wr_id = qpx.wr_id;
        wr.opcode = opcode;
        wr.send_flags = qpx.wr_flags & !IBV_SEND_INLINE;
        self.wrs.push(Wr {
            wr,
            sges: Vec::new(),
            inline: Vec::new(),
        });
        self.wrs.last_mut().map(|w| &mut w.wr)
    }

    /// The last work request, or the error of a builder called before any.
    fn last(&mut self) -> Option<&mut Wr> {
        if self.error.is_some() {
            return None;
        }
        if self.wrs.is_empty() {
            self.error = Some(libc::EINVAL);
        }
        self.wrs.last_mut()
    }

    /// `ibv_wr_set_ud_addr`.
    pub fn set_ud_addr(&mut self, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
        if let Some(w) = self.last() {
            w.wr.wr.ud = ibv_send_wr_ud {
                ah,
                remote_qpn: qpn,
                remote_qkey: qkey,
            };
        }
    }

    /// `ibv_wr_set_sge_list` (and `ibv_wr_set_sge`, a list of one).
    pub fn set_sges(&mut self, sges: &[ibv_sge]) {
        if let Some(w) = self.last() {
            w.sges = sges.to_vec();
            w.inline.clear();
            w.wr.send_flags &= !IBV_SEND_INLINE;
        }
    }

    /// `ibv_wr_set_inline_data_list` (and `ibv_wr_set_inline_data`).
    pub fn set_inline(&mut self, bufs: &[(*const u8, usize)]) {
        if let Some(w) = self.last() {
            w.inline = bufs
                .iter()
                .map(|&(p, n)| {
                    if n == 0 {
                        Vec::new()
                    } else {
                        // SAFETY: the application's buffer of `n` bytes, valid during the call.
                        unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
                    }
                })
                .collect();
            w.sges = w
                .inline
                .iter()
                .map(|b| ibv_sge {
                    addr: b.as_ptr() as u64,
                    length: b.len() as u32,
                    lkey: 0,
                })
                .collect();
            w.wr.send_flags |= IBV_SEND_INLINE;
        }
    }

    /// The batch as a linked list to post (null for none), or the kept error. The list
    /// points into the batch, which must outlive the post.
    pub fn chain(&mut self) -> Result<*mut ibv_send_wr, c_int> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut next: *mut ibv_send_wr = null_mut();
        for w in self.wrs.iter_mut().rev() {
            w.wr.sg_list = if w.sges.is_empty() {
                null_mut()
            } else {
                w.sges.as_mut_ptr()
            };
            w.wr.num_sge = w.sges.len() as c_int;
            w.wr.next = next;
            next = &mut w.wr;
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_chains_its_requests_with_their_own_sges_and_inline_copies() {
        let mut x = ibv_qp_ex::zeroed();
        let mut b = Batch::default();
        x.wr_id = 7;
        x.wr_flags = IBV_SEND_SIGNALED;
        b.begin(&x, IBV_WR_SEND).unwrap();
        let data = *b"hello";
        b.set_inline(&[(data.as_ptr(), data.len())]);
        x.wr_id = 8;
        x.wr_flags = 0;
        b.begin(&x, IBV_WR_RDMA_WRITE).unwrap();
        b.set_sges(&[ibv_sge {
            addr: 0x1000,
            length: 64,
            lkey: 3,
        }]);
        let head = b.chain().unwrap();
        // SAFETY: the chain points into `b`, alive here.
        let (first, second) = unsafe { (&*head, &*(*head).next) };
        assert_eq!(
            (first.wr_id, first.opcode, first.num_sge),
            (7, IBV_WR_SEND, 1)
        );
        assert_ne!(first.send_flags & IBV_SEND_INLINE, 0);
        // SAFETY: one SGE, naming the batch's copy of the data.
        let sge = unsafe { *first.sg_list };
        assert_ne!(sge.addr, data.as_ptr() as u64, "inline data is copied");
        assert_eq!(sge.length, 5);
        assert_eq!((second.wr_id, second.send_flags, second.num_sge), (8, 0, 1));
        assert!(second.next.is_null());
    }

    #[test]
    fn a_builder_before_any_request_fails_the_batch() {
        let mut b = Batch::default();
        b.set_sges(&[]);
        assert_eq!(b.chain(), Err(libc::EINVAL));
        assert!(Batch::default().chain().unwrap().is_null());
    }
}
