#!/usr/bin/env python3
"""The Soft-RoCE side of tests/tests/vm_rxe.rs's ATOMIC WRITE and FLUSH test.

An RC QP on rxe0 (pyverbs) with a 4 KiB region that allows remote writes and FLUSH to
global visibility. Over TCP (it listens on PORT) it swaps QP numbers, GIDs, PSNs, rkeys
and addresses with the rnic side, which then sends its ATOMIC WRITE and FLUSHes here.
When the rnic side says so, it prints the bytes its region got, sends its own ATOMIC
WRITE and FLUSH to rnic's region, prints their completions, and tells the rnic side.

Usage: atomic_write_peer.py GID_INDEX PORT. Lines starting with PEER are for the test.
"""

import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QPAttr, QPCap, QPEx, QPInitAttrEx

GID_INDEX, PORT = int(sys.argv[1]), int(sys.argv[2])
PSN = 0x3456


def gid_text(hex32):
    return ':'.join(hex32[i:i + 4] for i in range(0, 32, 4))


def poll(cq, n):
    wcs, deadline = [], time.time() + 30
    while len(wcs) < n and time.time() < deadline:
        _, got = cq.poll(n - len(wcs))
        wcs.extend(got)
    return wcs


ctx = Context(name='rxe0')
pd = PD(ctx)
cq = CQ(ctx, 16)
mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
        e.IBV_ACCESS_FLUSH_GLOBAL)
mr.write(b'\x5a' * 4096, 4096)
cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
init = QPInitAttrEx(qp_type=e.IBV_QPT_RC, pd=pd, scq=cq, rcq=cq, cap=cap,
                    send_ops_flags=e.IBV_QP_EX_WITH_ATOMIC_WRITE | e.IBV_QP_EX_WITH_FLUSH,
                    comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
attr = QPAttr(port_num=1)
attr.qp_access_flags = (e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_FLUSH_GLOBAL |
                        e.IBV_ACCESS_FLUSH_PERSISTENT)
qp = QPEx(ctx, init, attr)
own_gid = ctx.query_gid(1, GID_INDEX).gid.replace(':', '')

srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(('0.0.0.0', PORT))
srv.listen(1)
print(f'PEER listening on {PORT}', flush=True)
conn, _ = srv.accept()
f = conn.makefile('rw')
rqpn, rgid, rpsn, rrkey, raddr = f.readline().split()
f.write(f'{qp.qp_num} {own_gid} {PSN} {mr.rkey} {mr.buf}\n')
f.flush()

attr.path_mtu = e.IBV_MTU_1024
attr.max_dest_rd_atomic = 4
attr.max_rd_atomic = 4
attr.min_rnr_timer = 12
attr.timeout = 14
attr.retry_cnt = 7
attr.rnr_retry = 7
attr.ah_attr = AHAttr(port_num=1, is_global=1,
                      gr=GlobalRoute(dgid=GID(gid_text(rgid)), sgid_index=GID_INDEX))
attr.dest_qp_num = int(rqpn)
attr.rq_psn = int(rpsn)
attr.sq_psn = PSN
qp.to_rts(attr)
f.write('ready\n')
f.flush()

# The rnic side's ATOMIC WRITE and FLUSHes come in; it says when they completed.
assert f.readline().strip() == 'rnic-done'
print(f'PEER region {mr.read(24, 0).hex()}', flush=True)

qp.wr_start()
qp.wr_id = 1
qp.wr_flags = e.IBV_SEND_SIGNALED
qp.wr_atomic_write(int(rrkey), int(raddr) + 16, b'rxe2rnic')
qp.wr_id = 2
qp.wr_flush(int(rrkey), int(raddr), 64, e.IBV_FLUSH_GLOBAL, e.IBV_FLUSH_RANGE)
qp.wr_id = 3
qp.wr_flush(int(rrkey), 0, 0, e.IBV_FLUSH_GLOBAL, e.IBV_FLUSH_MR)
qp.wr_complete()
for wc in poll(cq, 3):
    print(f'PEER wc {wc.wr_id} status {wc.status} opcode {wc.opcode}', flush=True)
f.write('rxe-done\n')
f.flush()
# The rnic side's last FLUSH is refused here: wait for it before going.
f.readline()
print('PEER end', flush=True)
