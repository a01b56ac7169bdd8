"""Moving the methods' shared parts into flplat.blocks (exported by flplat.api), their state from
``ServerState.extra`` to a dataclass of their own in ``ServerState.method``, and FedEM's rounds into a base that
FedRC shares changed no result: per round, the tiny federation of ``flplat check`` gives every method below the
metrics it gave before the change (computed with flplat as it was then; clustered and personalised methods with
state of their own, and Flux with clustering from round 2 and re-clustering every round so its late joiners,
re-clustering and test phase run). Three methods with the most state of their own (HACCS, FedEM, CAFA) run in the
default suite; the rest under ``-m slow`` (Flux re-clustering every round takes a minute on two cores)."""

from __future__ import annotations

import math

import pytest

from flplat.studies.conformance import Target

# (algorithm, overrides beyond the conformance federation, metrics, per round the values before the change)
BEFORE = [
    ("flux", {"algorithm.start_round": 2, "algorithm.recluster_every": 1, "federation.rounds": 4},
     ("mean_local_accuracy", "train_loss", "tau", "descriptor_bytes"),
     [(0.4040502508244444, 1.3836088136390403, None, 0.0),
      (0.5658935598451728, 1.0933524491652002, 2.0, 1488.0),
      (0.5916661743274647, 1.0626551644250295, 3.0, 1600.0),
      (0.6648984975597879, 1.094509643537027, 2.0, 2000.0)]),
    ("flux_soft", {"algorithm.start_round": 2, "federation.rounds": 4},
     ("mean_local_accuracy", "train_loss", "tau", "descriptor_bytes"),
     [(0.4040502508244444, 1.3836088136390403, None, 0.0),
      (0.5658935598451728, 1.0933524491652002, 2.0, 1488.0),
      (0.6803758517468196, 1.0626551644250295, 2.0, 400.0),
      (0.9228139691849369, 1.0361125976951033, 2.0, 800.0)]),
    ("haccs", {},
     ("mean_local_accuracy", "train_loss"),
     [(0.43191754482077066, 1.235599684923497),
      (0.5951564116886697, 1.1483929599736975),
      (0.7497511449124352, 1.0632969500196032)]),
    ("haccs", {"algorithm.losses": "last"},
     ("mean_local_accuracy", "train_loss"),
     [(0.43191754482077066, 1.235599684923497),
      (0.5951564116886697, 1.1483929599736975),
      (0.7497511449124352, 1.0632969500196032)]),
    ("fedcls", {},
     ("mean_local_accuracy", "train_loss"),
     [(0.4040502508244444, 1.3836088136390403),
      (0.6358048313693475, 1.216677951591986),
      (0.7742204032526613, 1.0915661876564784)]),
    ("poc", {},
     ("mean_local_accuracy", "train_loss"),
     [(0.4040502508244444, 1.3836088136390403),
      (0.6005340985179696, 1.2251315712928772),
      (0.7834345314184024, 1.0716501059739485)]),
    ("fedem", {},
     ("mean_local_accuracy", "train_loss", "tau", "mixture_accuracy"),
     [(0.4037091940317747, 1.2837194913909549, 3.0, 0.2857142857142857),
      (0.5096382112511145, 1.2497944014484872, 3.0, 0.5042016806722689),
      (0.5848882300495203, 1.0040740678972164, 3.0, 0.5882352941176471)]),
    ("fedrc", {},
     ("mean_local_accuracy", "train_loss", "tau", "mixture_accuracy"),
     [(0.4090855381177962, 1.2837194913909549, 3.0, 0.2857142857142857),
      (0.5224587240716273, 1.32261625498156, 3.0, 0.4957983193277311),
      (0.5848882300495203, 1.0950155586797474, 3.0, 0.6050420168067226)]),
    ("cafa", {},
     ("mean_local_accuracy", "train_loss", "tau", "silhouette", "abfa_weight_max", "iid_cluster_size"),
     [(0.3964744932486868, 1.400369160745773, 4.0, 0.3053513341643019, 0.48484848484848475, 2.0),
      (0.5074038864361444, 1.135080628658659, 4.0, 0.3053513341643019, 0.3732394366197183, 2.0),
      (0.6180982995499125, 1.133340487646502, 4.0, 0.3053513341643019, 0.3495145631067961, 2.0)]),
    ("fedsoft", {},
     ("mean_local_accuracy", "train_loss", "tau", "importance_bytes_down"),
     [(0.6305889724310777, 1.242494683503609, 5.0, 33120.0),
      (0.8498193400167083, 1.2051320586531673, 5.0, 0.0),
      (0.9405545112781954, 1.1103436666813808, 5.0, 33120.0)]),
    ("feddrift", {},
     ("mean_local_accuracy", "train_loss", "tau"),
     [(0.5226120205958916, 1.3836088136390403, 6.0),
      (0.5872751800171155, 1.0918832401059708, 2.0),
      (0.7093267395686751, 1.0375409147104322, 2.0)]),
    ("pqfed", {},
     ("mean_local_accuracy", "train_loss", "target_accuracy", "emd_max"),
     [(0.47071946870333964, 1.3365274667739868, 0.6363636363636364, 6.888088865969649),
      (0.5183734276476212, 1.1306533813476562, 0.8636363636363636, 6.888088865969649),
      (0.5260539191990805, 0.9162265658378601, 0.9090909090909091, 6.888088865969649)]),
    ("dapfl", {},
     ("mean_local_accuracy", "train_loss", "dapfl_alpha_max"),
     [(0.5080918185756895, 1.3885273878221158, 0.6111153167135422),
      (0.6456397545107223, 1.1059321938820605, 0.5997177718917632),
      (0.7266420855130532, 1.0507881683033107, 0.5777485658464245)]),
    ("fedamp", {},
     ("mean_local_accuracy", "train_loss"),
     [(0.5080918185756895, 1.388534743476797),
      (0.6456397545107223, 1.1059321938820605),
      (0.7266420855130532, 1.0386644224412576)]),
    ("clust_psi_pfl", {},
     ("mean_local_accuracy", "train_loss", "tau", "silhouette"),
     [(0.4941404921243631, 1.3836088136390403, 3.0, 0.23160174619071006),
      (0.6725295314004991, 1.0600059725203603, 3.0, 0.23160174619071006),
      (0.7307907146616824, 1.0100055573809095, 3.0, 0.23160174619071006)]),
    ("apfl", {},
     ("mean_local_accuracy", "train_loss", "alpha_mean"),
     [(0.647737119511313, 1.3836088136390403, 0.5047954058873559),
      (0.8337849426559104, 1.0933524491652002, 0.5071487755207637),
      (0.8489364578074255, 1.0626551644250295, 0.5164337137633993)]),
    ("atp", {},
     ("mean_local_accuracy", "train_loss", "alpha_mean", "tta_accuracy"),
     [(0.4040502508244444, 1.3836088136390403, -0.0021538861494048403, 0.36134453781512604),
      (0.5658935598451728, 1.0933524491652002, 0.0014568891192405901, 0.5294117647058824),
      (0.721411205282173, 1.0626551644250295, 0.004798618070478629, 0.7142857142857143)]),
    ("feddyn", {},
     ("mean_local_accuracy", "train_loss"),
     [(0.4743202585944522, 1.3836600283781688),
      (0.7457408183214635, 1.086737793346621),
      (0.9643206256109482, 0.9908038752568341)]),
    ("creff", {},
     ("mean_local_accuracy", "train_loss", "match_distance"),
     [(0.45241854919274277, 1.3836088136390403, 14.910175323486328),
      (0.5630628332241235, 1.0933524491652002, 10.116500854492188),
      (0.7581728307534759, 1.0626551644250295, 7.536855220794678)]),
    ("fedpfa", {},
     ("mean_local_accuracy", "train_loss", "tau", "silhouette"),
     [(0.4040502508244444, 1.3836088136390403, 2.0, 0.37152993147954194),
      (0.5589491154007283, 1.0933524491652002, 2.0, 0.37152993147954194),
      (0.6658556497266175, 1.0626551644250295, 2.0, 0.37152993147954194)]),
    ("fesem", {},
     ("mean_local_accuracy", "train_loss", "tau"),
     [(0.46625149044503883, 1.2658115117507573, 2.0),
      (0.5727820566530243, 1.0117135611976065, 2.0),
      (0.6412344376054053, 1.185880319366242, 2.0)]),
    ("ifca", {},
     ("mean_local_accuracy", "train_loss", "tau"),
     [(0.4897414413543446, 1.0384771457085242, 2.0),
      (0.5835985251307833, 0.9383203706433696, 2.0),
      (0.6279768618478296, 0.919405574333377, 2.0)]),
    ("fedrep", {},
     ("mean_local_accuracy", "train_loss"),
     [(0.6805857672793157, 1.1908497479226854),
      (0.8407293871003548, 0.9367208003997802),
      (0.8407293871003548, 0.7092197160012857)]),
    ("fedadam", {},
     ("mean_local_accuracy", "train_loss"),
     [(0.4040502508244444, 1.3836088136390403),
      (0.6362544265770073, 1.0957597489626902),
      (0.9184151422054647, 1.054973541649148)]),
]


FAST = {"haccs-2", "fedem-6", "cafa-8"}
CASES = [pytest.param(*b, id=i, marks=() if i in FAST else pytest.mark.slow)
         for i, b in ((f"{b[0]}-{n}", b) for n, b in enumerate(BEFORE))]


@pytest.mark.parametrize("name,overrides,keys,rows", CASES)
def test_methods_give_the_metrics_they_gave_before(name, overrides, keys, rows):
    history = Target(name, [f"{k}={v}" for k, v in overrides.items()]).reference().history
    got = [tuple(h.get(k) for k in keys) for h in history]
    assert len(got) == len(rows)
    for t, (g, want) in enumerate(zip(got, rows), start=1):
        for k, x, y in zip(keys, g, want):
            same = x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
            assert same or x == pytest.approx(y, rel=1e-9, abs=1e-12), f"round {t}: {k} {x!r} != {y!r}"
