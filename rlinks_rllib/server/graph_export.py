"""An RLModule's inference pass as an ONNX graph whose weights are inputs.

A client that can't run RLlib's default MLP in numpy (a CNN, a Dict of image
and vector, an LSTM) runs this graph with onnxruntime instead, or with the ONNX
runtime its engine already has. The graph is exported once per architecture;
the weights stay out of it, as graph inputs named like the parameters in
RLlib's state dict, so every ``SET_STATE`` feeds the same graph new arrays
and an update is never a re-export.

The graph's interface (also written into its metadata as JSON):

- inputs ``obs`` (a plain space) or ``obs['camera']``, ``obs['sensors'][0]``
  ... (a nested one; the key paths of :func:`rlinks_rllib.protocol.spaces.leaves`,
  in that order), each with a leading batch axis, in the space's dtype;
- for a recurrent module, ``state_in['h']`` ... (one per entry of the
  module's initial state, with a leading batch axis), and the same names with
  ``state_out`` as outputs;
- one input per parameter the inference pass reads, named as in the state
  dict;
- the output ``action_dist_inputs``, ``(batch, n)``: what RLlib's action
  distribution takes.

A recurrent module's graph takes one time step (RLlib's time axis is added
and removed inside the graph).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns

from ..protocol.errors import RLinksError
from ..protocol.policy_graph import METADATA_KEY, OUTPUT, make_interface, observation_input_names, state_names
from ..protocol.spaces import describe_space, leaves

__all__ = ["export_policy_graph", "needs_policy_graph", "ExportError"]


class ExportError(RLinksError):
    """The module can't be exported so that its weights stay graph inputs."""


class _InferencePass(torch.nn.Module):
    """``forward_inference`` with flat tensors in and out, as an exporter needs."""

    def __init__(self, module: Any, space_desc: dict, state_keys: list[str]) -> None:
        super().__init__()
        self.module = module
        self.space_desc = space_desc
        self.state_keys = state_keys

    def forward(self, inputs: dict) -> Any:
        flat = list(inputs.values())
        leaf_count = len(flat) - len(self.state_keys)
        obs = _rebuild(self.space_desc, iter(flat[:leaf_count]))
        batch = {Columns.OBS: obs}
        if self.state_keys:
            batch[Columns.OBS] = _map_leaves(obs, lambda t: t.unsqueeze(1))
            batch[Columns.STATE_IN] = dict(zip(self.state_keys, flat[leaf_count:]))
        out = self.module.forward_inference(batch)
        logits = out[Columns.ACTION_DIST_INPUTS]
        if not self.state_keys:
            return logits
        return (logits.squeeze(1), *(out[Columns.STATE_OUT][key] for key in self.state_keys))


def _rebuild(desc: dict, flat: Any) -> Any:
    """The nested observation of *desc* from its leaves, taken in order from *flat*."""
    if desc["kind"] == "dict":
        return {key: _rebuild(sub, flat) for key, sub in desc["spaces"].items()}
    if desc["kind"] == "tuple":
        return [_rebuild(sub, flat) for sub in desc["spaces"]]
    return next(flat)


def _map_leaves(obs: Any, fn: Any) -> Any:
    if isinstance(obs, dict):
        return {k: _map_leaves(v, fn) for k, v in obs.items()}
    if isinstance(obs, list):
        return [_map_leaves(v, fn) for v in obs]
    return fn(obs)


def _example_leaves(observation_space: Any, batch: int) -> list[torch.Tensor]:
    observation_space.seed(0)
    samples = [observation_space.sample() for _ in range(batch)]
    out = []
    for path, _ in leaves(describe_space(observation_space)):
        values = []
        for sample in samples:
            for part in path:
                sample = sample[part]
            values.append(np.asarray(sample))
        out.append(torch.as_tensor(np.stack(values)))
    return out


def needs_policy_graph(module: Any, model_config: Any) -> bool:
    """Whether a client can't run *module* in numpy and needs its graph (``policy_graph="auto"``).

    NumpyPolicy runs RLlib's own default modules on a vector observation
    without memory; anything else (an image or nested observation, an LSTM
    or attention, a module class from outside RLlib) needs the graph.
    """
    space = module.observation_space
    vector = type(space).__name__ == "Box" and len(space.shape) == 1
    get = model_config.get if isinstance(model_config, dict) else lambda key: getattr(model_config, key, None)
    memory = bool(get("use_lstm") or get("use_attention"))
    return not vector or memory or not type(module).__module__.startswith("ray.rllib.")


def export_policy_graph(module: Any) -> bytes:
    """Export *module*'s ``forward_inference`` as ONNX bytes with its weights as inputs.

    Raises:
        ExportError: torch can't export the module, or the exported graph
            would bake in a parameter the inference pass reads (so a weight
            update would not reach it).
    """
    try:
        import onnx
        from onnx import helper
    except ImportError as exc:
        raise ExportError("exporting a policy graph needs onnx and onnxscript (pip install 'rlinks-rllib[rllib]')") from exc

    module.eval()
    space = module.observation_space
    space_desc = describe_space(space)
    obs_names = observation_input_names(space_desc)
    initial = module.get_initial_state() if module.is_stateful() else {}
    if not all(isinstance(v, torch.Tensor) for v in initial.values()):
        raise ExportError("a recurrent module's initial state must be a flat map of tensors")
    state_keys = list(initial)
    wrapper = _InferencePass(module, space_desc, state_keys).eval()
    example_obs = _example_leaves(space, 2)
    example_state = [value.unsqueeze(0).expand(2, *value.shape).contiguous() for value in initial.values()]
    state_in, state_out = state_names("state_in", initial), state_names("state_out", initial)
    try:
        program = torch.onnx.export(
            wrapper,
            (),
            # Keys become Python identifiers inside torch.export; the ONNX names come from input_names.
            kwargs={"inputs": {f"x{i}": value for i, value in enumerate(example_obs + example_state)}},
            dynamo=True,
            input_names=obs_names + state_in,
            output_names=[OUTPUT] + state_out,
            dynamic_shapes={"inputs": {f"x{i}": {0: torch.export.Dim("batch")} for i in range(len(obs_names + state_in))}},
            # Folding is left to the runtime, which can't fold graph inputs:
            # the exporter's optimizer might bake a weight into a constant.
            optimize=False,
            verbose=False,
        )
    except Exception as exc:  # noqa: BLE001 - torch.export raises many kinds; all mean "can't export this"
        raise ExportError(f"torch could not export the module's inference pass: {exc}") from exc
    signature = program.exported_program.graph_signature
    read = set(signature.inputs_to_parameters.values())
    used = [name for name, _ in module.named_parameters() if f"module.{name}" in read]
    if not used:
        raise ExportError("the module's inference pass reads no parameters")
    model = program.model_proto  # a fresh proto on every access: take it once
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    rename = {}
    for name in used:
        init = initializers.get(f"module.{name}")
        if init is None:
            continue  # read by a branch whose output the graph drops (a value head)
        rename[init.name] = name
        graph.input.append(helper.make_tensor_value_info(name, init.data_type, list(init.dims)))
        graph.initializer.remove(init)
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]
    interface = make_interface(space_desc, {k: v.numpy() for k, v in initial.items()}, list(rename.values()))
    helper.set_model_props(model, {METADATA_KEY: interface})
    onnx.checker.check_model(model)
    return model.SerializeToString()
