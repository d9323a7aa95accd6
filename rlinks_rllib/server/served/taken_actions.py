"""Actions a simulator took itself while served (``served_taken``, PROTOCOL.md 10.5.1).

A served simulator may act on its own for some rows of an ``ACT`` (a person
at the controls, a scripted controller, RLlib's old ``log_action``). The
runner records such a step as a local-inference client records one: the
action as taken, put back in the form RLlib trains on (a Box action squashed
back into ``[-1, 1]`` when ``normalize_actions`` is on), with the policy's
log-probability of it and the distribution inputs of the forward pass that
ran for that row anyway. The ``ACTIONS`` answer carries the taken action
back, so a client needs no second path.

:class:`TakenActionCheck` refuses bad taken actions before anything of the
``ACT`` is recorded; :func:`with_taken` rewrites a forward pass's rows.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...client.policies.action_spaces import BoxSpace, as_action_space
from ...client.policies.sampling import action_from_env
from ...protocol.served import ActRows
from ..errors import IngestError
from .batcher import InferenceResult

__all__ = ["TakenActionCheck", "with_taken"]

#: ``(action_dist_inputs, actions)`` -> float32 log-probabilities, one per row: the forward pass's distribution's.
LogProb = Callable[[np.ndarray, np.ndarray], np.ndarray]


class TakenActionCheck:
    """Turns an ``ACT``'s ``taken`` into one array of actions in the env's form (rows outside the mask zero).

    Args:
        action_space: the runner's ``Discrete`` or ``Box`` (gymnasium's, or the client's form).

    Raises (from a call):
        IngestError: (``bad_episode``) taken actions that don't stack, are not
            numbers, have another shape, a Discrete action out of range, or a
            Box action with a NaN or an infinity. Box actions beyond the
            bounds are clipped to them (a person's stick may overshoot).
    """

    def __init__(self, action_space: Any) -> None:
        self.space = as_action_space(action_space)
        self._shape = self.space.shape if isinstance(self.space, BoxSpace) else ()
        self._dtype = np.float32 if isinstance(self.space, BoxSpace) else np.int64

    def __call__(self, rows: ActRows) -> np.ndarray:
        mask = rows.taken_mask
        try:
            taken = np.asarray(rows.taken)
        except (ValueError, TypeError, OverflowError) as exc:
            raise IngestError(f"ACT: 'taken' does not stack into one array ({exc})"[:300]) from None
        if taken.dtype.kind not in "biuf":
            raise IngestError(f"ACT: 'taken' has dtype {taken.dtype}; actions must be numbers")
        if taken.shape != (len(rows), *self._shape):
            raise IngestError(f"ACT: 'taken' has shape {taken.shape}; {len(rows)} actions of this runner's "
                              f"space are {(len(rows), *self._shape)}")
        chosen = taken[mask]
        if isinstance(self.space, BoxSpace):
            if not np.isfinite(chosen).all():
                raise IngestError("ACT: a taken Box action holds a NaN or an infinity")
            chosen = np.clip(chosen, self.space.low, self.space.high)
        elif chosen.dtype.kind == "f" and not np.array_equal(chosen, np.round(chosen)):
            raise IngestError("ACT: a taken Discrete action is not a whole number")
        else:
            bad = (chosen < 0) | (chosen >= self.space.n)
            if bad.any():
                raise IngestError(f"ACT: taken action {chosen[bad][0]!r} is outside 0..{self.space.n - 1}")
        out = np.zeros((len(rows), *self._shape), self._dtype)
        out[mask] = chosen
        return out


def with_taken(result: InferenceResult, mask: np.ndarray, taken: np.ndarray, *, space: Any, normalize: bool,
               logp: LogProb) -> InferenceResult:
    """``result`` with the rows in ``mask`` holding the simulator's own actions ``taken[mask]`` (env form).

    The action recorded is ``taken`` in the form RLlib trains on, with
    ``logp`` of it under the row's own distribution inputs; the action for
    the env is ``taken`` itself.
    """
    space = as_action_space(space)
    recorded = action_from_env(space, taken[mask], normalize=normalize).reshape(result.actions[mask].shape)
    actions, for_env, action_logp = result.actions.copy(), result.actions_for_env.copy(), result.action_logp.copy()
    actions[mask] = recorded
    for_env[mask] = taken[mask].reshape(for_env[mask].shape)
    action_logp[mask] = logp(result.action_dist_inputs[mask], recorded)
    return InferenceResult(actions, for_env, action_logp, result.action_dist_inputs, result.weights_seq_no,
                           result.seconds)
