"""training/quiet.py drops the known-harmless lines by name, and nothing near them.

The learner's own output is checked in test_cli (test_learner_and_clients_with_two_cpu_learners).
"""

from __future__ import annotations

import logging
import os
import warnings

from rlinks_rllib.training import quiet


def test_known_log_lines_and_warnings_are_dropped_and_their_neighbours_kept(caplog):
    quiet.install()
    quiet.install()  # twice is harmless: one filter per logger
    deprecation = logging.getLogger("ray._common.deprecation")
    assert sum(isinstance(f, quiet._DropKnown) for f in deprecation.filters) == 1
    with caplog.at_level(logging.INFO):
        deprecation.warning("DeprecationWarning: `RLModule(config=[RLModuleConfig object])` has been deprecated. "
                            "Use `RLModule(observation_space=..)` instead.")
        deprecation.warning("DeprecationWarning: `Algorithm.compute_single_action` has been deprecated.")
        logging.getLogger("ray._private.worker").info("Started a local Ray instance.")
        logging.getLogger("ray._private.worker").info("Connected to Ray cluster.")
        logging.getLogger("some.other").info("Started a local Ray instance.")  # the same words elsewhere
    assert [r.getMessage() for r in caplog.records] == [
        "DeprecationWarning: `Algorithm.compute_single_action` has been deprecated.", "Connected to Ray cluster.",
        "Started a local Ray instance."]
    low = "\x1b[33mWARN: Box low's precision lowered by casting to float32, current low.dtype=float64\x1b[0m"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.install()  # in front of "always" again
        warnings.warn_explicit(low, UserWarning, "box.py", 236, module="gymnasium.spaces.box")
        warnings.warn_explicit(low, UserWarning, "my_env.py", 1, module="my_env")  # not gymnasium's
        warnings.warn_explicit(low.replace("float64", "int64"), UserWarning, "box.py", 236,
                               module="gymnasium.spaces.box")
    assert [(w.filename, "int64" in str(w.message)) for w in caught] == [("my_env.py", False), ("box.py", True)]


def test_stderr_passes_through_but_for_the_known_lines_of_ray_core(capfd):
    known = (b"[2026-11-24 23:09:34,756 E 1652 1652] core_worker.cc:2465: Actor with class name: 'RLinkEnvRunner' "
             b"and ID: '5e722fcccf0d2615c5e29efa01000000' has constructor arguments in the object store and "
             b"max_restarts > 0. If the arguments in the object store go out of scope or are lost, the actor restart "
             b"will fail. See https://github.com/ray-project/ray/issues/53727 for more details.\n")
    with quiet.stderr_without_known_lines():
        os.write(2, b"before\n" + known)
        os.write(2, b"[2026-11-24 23:09:35,000 E 1652 1652] core_worker.cc:100: a real error\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == ("before\n[2026-11-24 23:09:35,000 E 1652 1652] core_worker.cc:100: "
                                      "a real error\nafter\n")
