"""Local-only training: every client trains its own model on its own data and never communicates.

The lower reference of personalised FL (PQFed's "local" baseline). Each round the sampled clients continue
from their own previous model (the common initial model on their first round); each client is evaluated
with its own model. No bytes are exchanged.
"""

from __future__ import annotations

from flplat.api import ClientPlan, PersonalizedStrategy, register_algorithm


@register_algorithm
class LocalOnly(PersonalizedStrategy):
    name = "local"
    communicates = False

    def init_state(self, init_weights, rng, ops):
        state = super().init_state(init_weights, rng, ops)
        state.personal = self.info.client_store(default=state.weights)
        return state

    def plan(self, state, client):
        return ClientPlan(weights=state.personal.get(client))

