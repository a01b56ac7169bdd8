import numpy as np
import torch
from torch import nn

from flplat.api import ClientStore, ParamLayout, derive_seed
from flplat.engine.client import batch_bounds


def test_layout_roundtrip_includes_float_buffers_only():
    net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    lay = ParamLayout(net)
    # Linear: 3*2 + 2 = 8; BN: weight 2 + bias 2 + running_mean 2 + running_var 2 = 8; num_batches_tracked excluded
    assert lay.size == 16
    assert "1.num_batches_tracked" not in lay.names
    vec = torch.arange(16, dtype=torch.float32)
    lay.load(vec)
    assert torch.equal(lay.flatten(), vec)
    assert torch.equal(net[0].weight, torch.arange(6, dtype=torch.float32).view(2, 3))
    assert torch.equal(net[1].running_var, torch.tensor([14.0, 15.0]))


def test_layout_mask_selects_by_prefix():
    net = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    m = ParamLayout(net).mask("1.")
    assert m.sum() == 3 and not m[:8].any() and m[8:].all()


def test_client_store_defaults_and_writes():
    d = torch.zeros(4)
    s = ClientStore(3, 4, default=d)
    assert s.get(2) is d and not s.has(2)
    s.set(2, torch.ones(4))
    assert s.has(2) and torch.equal(s.get(2), torch.ones(4)) and s.get(0) is d


def test_batch_bounds_merge_trailing_singleton():
    assert batch_bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert batch_bounds(9, 4) == [(0, 4), (4, 9)]
    assert batch_bounds(1, 4) == [(0, 1)]


def test_derive_seed_is_stable_and_key_sensitive():
    a = derive_seed(0, "train", 1, 2)
    assert a == derive_seed(0, "train", 1, 2)
    assert len({a, derive_seed(0, "train", 2, 1), derive_seed(1, "train", 1, 2)}) == 3
    assert isinstance(a, int) and 0 <= a < 2**32
    assert np.random.default_rng(a).integers(10) == np.random.default_rng(a).integers(10)


def test_client_store_float16_and_on_disk(tmp_path):
    vec = torch.linspace(-1, 1, 5)
    half = ClientStore(3, 5, default=None, dtype=torch.float16)
    half.set(1, vec)
    assert half.get(1).dtype == torch.float32 and torch.allclose(half.get(1), vec, atol=1e-3)
    assert half.nbytes() == 3 * 5 * 2  # one block (of up to 64 clients) allocated by the first write
    lazy = ClientStore(1000, 5, default=vec, dtype=torch.float16, block=10)
    assert lazy.nbytes() == 0 and torch.equal(lazy.get(999), vec)  # unwritten rows read as the default
    lazy.set(999, -vec)
    lazy.set(995, vec)
    lazy.set(0, vec)
    assert lazy.nbytes() == 2 * 10 * 5 * 2  # only the blocks of clients 990-999 and 0-9 exist
    assert torch.allclose(lazy.get(999), -vec, atol=1e-3) and torch.equal(lazy.get(1), vec)
    disk = ClientStore(4, 5, dtype=torch.float32, path=str(tmp_path / "s" / "personal.bin"))
    disk.set(3, vec)
    assert torch.equal(disk.get(3), vec) and (tmp_path / "s" / "personal.bin").stat().st_size == 4 * 5 * 4
    raw = np.fromfile(tmp_path / "s" / "personal.bin", dtype=np.float32).reshape(4, 5)
    assert np.array_equal(raw[3], vec.numpy())  # the rows really live in the file


def test_local_only_with_on_disk_float16_state(tiny_cfg, tmp_path):
    from flplat.experiment import run

    s, _ = run(tiny_cfg(**{"algorithm.name": "local", "federation.client_state_dtype": "float16",
                           "federation.client_state_dir": str(tmp_path),
                           "federation.keep_client_state": "true"}), progress=False)
    (own,) = tmp_path.glob("run-*/personal.bin")  # the run's own subdirectory, kept on request
    assert own.exists() and s.state.personal.dtype == torch.float16
    assert np.isfinite(s.metrics["global_accuracy"])
