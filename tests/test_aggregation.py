import pytest
import torch

from flplat.api import ClientResult, fedavg, weighted_mean


def _r(client, w, n):
    return ClientResult(client=client, weights=torch.tensor(w, dtype=torch.float32), num_samples=n, train_loss=0.0)


def test_fedavg_is_the_sample_weighted_mean():
    # (10·[1,2,0] + 30·[3,-2,4]) / 40 = [(10+90)/40, (20-60)/40, (0+120)/40] = [2.5, -1.0, 3.0]
    out = fedavg([_r(0, [1.0, 2.0, 0.0], 10), _r(1, [3.0, -2.0, 4.0], 30)])
    assert torch.allclose(out, torch.tensor([2.5, -1.0, 3.0]))


def test_fedavg_single_client_is_identity():
    out = fedavg([_r(3, [0.1, 0.2], 7)])
    assert torch.equal(out, torch.tensor([0.1, 0.2]))


def test_weighted_mean_rejects_zero_total():
    with pytest.raises(ValueError):
        weighted_mean(torch.ones(2, 3), torch.zeros(2))


def test_fedavg_by_group_keeps_untouched_groups():
    from flplat.api import fedavg_by_group

    current = torch.tensor([[0.0, 0.0], [9.0, 9.0], [5.0, 5.0]])
    res = [_r(0, [1.0, 1.0], 1), _r(1, [4.0, 0.0], 3), _r(2, [2.0, 6.0], 2)]
    out = fedavg_by_group(res, [0, 0, 2], current)
    # group 0: (1·[1,1] + 3·[4,0]) / 4 = [3.25, 0.25]; group 1 untouched; group 2: [2, 6]
    assert torch.allclose(out, torch.tensor([[3.25, 0.25], [9.0, 9.0], [2.0, 6.0]]))
    assert torch.equal(current[0], torch.tensor([0.0, 0.0]))  # input not modified
