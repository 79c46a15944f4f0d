"""rdma-core's Python bindings (Debian's python3-pyverbs) on rnic's libibverbs: every
module of the package loads (each binds its libibverbs symbols at once), and the verbs
pyverbs wraps work on the devices RNIC_VFIO_USER names. Prints one `ok STEP ...` line
per step for ibverbs/tests/libraries.rs; any failure raises."""
import errno
import importlib
import os
import pkgutil

import pyverbs
import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr

# Every module, the providers' (which link libmlx5, libefa, ...) too.
modules = sorted(m.name for m in pkgutil.walk_packages(pyverbs.__path__, "pyverbs."))
for m in modules:
    importlib.import_module(m)
print("ok import", len(modules))

names = [dev.name.decode() for dev in d.get_device_list()]
print("ok devices", " ".join(names))

ctx = Context(name=names[0])
attr = ctx.query_device()
port = ctx.query_port(1)
print("ok query", attr.max_qp, attr.max_mr, port.state, port.active_mtu)

pd = PD(ctx)
mr = MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)
keys = (mr.lkey, mr.rkey)
mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, pd, 0, 0,
         e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
assert (mr.lkey, mr.rkey) != keys, "a re-registration gives new keys"
try:
    mr.rereg(1 << 3, pd, 0, 0, 0)
    raise AssertionError("unknown rereg flags accepted")
except PyverbsRDMAError as err:
    assert err.error_code == errno.EINVAL, err
print("ok rereg")

cq = CQ(ctx, 16)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(4, 4, 1, 1)))
whole = qp.query_data_in_order(e.IBV_WR_RDMA_WRITE)
caps = qp.query_data_in_order(e.IBV_WR_SEND, e.IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS)
print("ok data_in_order", whole, caps)

try:
    PD(ctx, handle=pd.handle)
    raise AssertionError("a PD imported")
except PyverbsRDMAError as err:
    assert err.error_code == errno.EOPNOTSUPP, err
try:
    Context(cmd_fd=os.open("/dev/null", os.O_RDWR))
    raise AssertionError("a context imported")
except PyverbsRDMAError as err:
    assert err.error_code == errno.EOPNOTSUPP, err
print("ok import_refused")

qp.close()
cq.close()
mr.close()
pd.close()
ctx.close()
print("ok done")
