"""Centralized learning (CL): the upper reference, one model trained on the pooled training data.

Each round trains the global model for E epochs on the union of every client's train split (as if the data
were collected on one server); every client is then scored with that model on its own test split, so CL's
metrics are comparable with the federated methods'. Nothing is communicated.
"""

from __future__ import annotations

import numpy as np

from flplat.api import ClientPlan, Strategy, register_algorithm

POOLED = -1  # the client id of the virtual pooled client


@register_algorithm
class Centralized(Strategy):
    name = "centralized"
    communicates = False

    def select(self, state, rng, ops):
        return np.array([POOLED])

    def plan(self, state, client):
        return ClientPlan(weights=state.weights, indices=self.info.all_train_indices)

    def aggregate(self, state, results, ops):
        (r,) = results
        state.weights = r.weights
        return state
