"""The host-sync audit (basis.runtime.syncs): it counts what would make a CUDA host wait, on the CPU."""

import numpy as np
import torch

from basis.cli.bench import count_host_syncs
from basis.runtime.syncs import HostSyncCounter


def test_each_kind_of_host_wait_is_counted_and_plain_tensor_work_is_not():
    t = torch.arange(6.0)
    with HostSyncCounter() as syncs:
        u = (t * 2 + 1) @ t  # device work only
        t.sum().item(), float(t.max()), bool(t.any())
        t[t > 2], torch.nonzero(t), torch.masked_select(t, t > 0)
        t.numpy(), np.asarray(t), t.tolist(), t.cpu()
    assert u.shape == ()
    assert syncs.counts == {
        "item": 3,
        "boolean_mask": 1,
        "nonzero": 1,
        "masked_select": 1,
        "numpy": 2,
        "tolist": 1,
        "copy_to_host": 1,
    }
    t.numpy()  # the counter is gone after the block, and the tensor methods are torch's again
    assert syncs.total == 10 and torch.Tensor.numpy.__qualname__ == "TensorBase.numpy"


def test_a_basis_iteration_reads_the_device_once():
    """Issue #20's floor: one read per iteration on the path CUDA takes (the batch's checks,
    the alignment's diagnostics and, every LOSS_BLOCK steps, the losses, in one transfer),
    and one more at the end of the run for the last losses. The CPU's Adam (basis.runtime.optim)
    counts its steps in Python, so it reads nothing; the decompositions' convergence checks
    are counted apart."""
    threads = torch.get_num_threads()
    report = count_host_syncs(batch_size=128, n_components=4, n_neighbors=10, n_iter=60)
    steps = report["iterations"]
    assert report["total"] * steps <= steps + 1, report
    assert set(report["by_kind"]) == {"tolist"}, report
    assert report["linalg_checks"] and not report["exempt"], report
    assert torch.get_num_threads() == threads  # counted with one thread, then restored


def test_decompositions_that_check_on_the_host_are_counted_apart():
    A = torch.randn(6, 3, dtype=torch.float64)
    with HostSyncCounter() as syncs:
        torch.linalg.svd(A, full_matrices=False), torch.linalg.eigh(A.T @ A), torch.linalg.qr(A)
    assert syncs.linalg_checks == {"svd": 1, "eigh": 1} and syncs.total == 0


def test_the_host_side_step_counters_of_adam_are_exempt_and_a_loss_read_is_not():
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(layer.parameters())
    with HostSyncCounter() as syncs:
        loss = layer(torch.randn(4, 3)).pow(2).mean()
        loss.backward()
        optimizer.step()  # reads its two step counters, which torch keeps on the host
        float(loss)
    assert syncs.exempt == {"optimizer_step_counter": 2}
    assert syncs.counts == {"item": 1}
