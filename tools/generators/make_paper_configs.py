"""Write the ready configs for the Clust-PSI-PFL Table III / IV cells (its six datasets, and digits) and Figs. 5-8.

One YAML per (dataset, K, partition setting) under configs/clust_psi_pfl/table3/, with the paper's training
setup (§IV-A: T=40, q=0.5, E=5, Adam lr 1e-3, batch 32, 80/20 client train/test split) and the paper's model per
dataset (§IV-A-d): ACSIncome a logistic regression (``logreg``), Serengeti an MLP with three hidden layers of 500
(``mlp3x500``), FMNIST the light CNN (``fmnist_cnn``), CIFAR-10 the three-block CNN with batch norm and dropout
(``cifar_cnn``), Sent140 embedding + dropout + 10-unit LSTM (``sent140_lstm``), Amazon reviews embedding -> flatten
-> 8-unit ReLU (``amazon_dnn``). Tables III/IV are K = 100; ACSIncome also K = 10 and 50 (Figs. 5-7 vary K).
The algorithm is chosen at run time: `flplat run CONFIG algorithm.name=clust_psi_pfl` (or any other).
Re-run this script after changing the template: python tools/generators/make_paper_configs.py
"""

from __future__ import annotations

from pathlib import Path

ALPHAS = [50, 0.7, 0.3, 0.2, 0.09, 0.05]
S_VALUES = [1, 0.03, 0]
CLIENTS = [10, 50, 100]
# dataset -> (model, numbers of clients K)
DATASETS = {"fmnist": ("fmnist_cnn", CLIENTS), "digits": ("mlp", CLIENTS), "acs_income": ("logreg", CLIENTS),
            "serengeti": ("mlp3x500", [100]), "cifar10": ("cifar_cnn", [100]), "sent140": ("sent140_lstm", [100]),
            "amazon_reviews": ("amazon_dnn", [100])}

TEMPLATE = """# Clust-PSI-PFL (seed 000) Table III/IV cell: {dataset}, K={k}, {setting}.
# Paper setup (§IV-A): T=40 rounds, q=0.5, E=5 local epochs, Adam lr=1e-3, batch 32, 80/20 train/test per client.
# Run:  flplat run {path} algorithm.name=clust_psi_pfl seed=0   (5 seeds: flplat sweep {path} --seeds 0,1,2,3,4)
seed: 0
data:
  name: {dataset}
partition:
  name: {pname}
  num_clients: {k}
{pline}
  train_fraction: 0.8
  test_fraction: 0.2
model:
  name: {model}
algorithm:
  name: fedavg
federation:
  rounds: 40
  client_fraction: 0.5
  local_epochs: 5
  batch_size: 32
  optimizer:
    name: adam
    lr: 0.001
tracking:
  experiment: table3-{dataset}-k{k}
"""


def main() -> None:
    root = Path(__file__).resolve().parents[2] / "configs" / "clust_psi_pfl" / "table3"
    root.mkdir(parents=True, exist_ok=True)
    for dataset, (model, clients) in DATASETS.items():
        for k in clients:
            cells = [("dirichlet", f"  alpha: {a}", f"dirichlet_{a}", f"Dirichlet alpha={a}") for a in ALPHAS]
            cells += [("similarity", f"  similarity: {s}", f"similarity_{s}", f"Similarity S={s}") for s in S_VALUES]
            for pname, pline, tag, setting in cells:
                path = root / f"{dataset}_k{k}_{tag}.yaml"
                rel = path.relative_to(root.parents[2])
                path.write_text(TEMPLATE.format(dataset=dataset, k=k, setting=setting, pname=pname, pline=pline,
                                                model=model, path=rel))


if __name__ == "__main__":
    main()
