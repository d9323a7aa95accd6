// RLlib's default MLP RLModule (PPO, APPO, IMPALA on a vector observation) run in C#.
//
// The forward pass of the actor: the encoder (encoder.actor_encoder.net.mlp.*,
// or encoder.encoder.net.mlp.* with shared layers), then the pi head
// (pi.net.mlp.*): Linear layers y = x W^T + b (torch's [out, in]), an
// optional LayerNorm after each, the model config's activations between.
// Its output is the action distribution's inputs: logits for a Discrete
// space, means and log-stds (clamped to pi.log_std_clip_param_const, or the
// free pi.log_std) for a Box. The computation of the Python client's
// mlp.read_network, the C++ Network and the JavaScript Network.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Text.RegularExpressions;

namespace Rlinks
{
    public sealed class Mlp
    {
        const float LayerNormEpsilon = 1e-3f;  // RLlib's TorchMLP builds nn.LayerNorm(eps=0.001)
        static readonly string[] EncoderPrefixes = { "encoder.encoder.net.mlp.", "encoder.actor_encoder.net.mlp." };
        const string PiPrefix = "pi.net.mlp.", PiLogStd = "pi.log_std", PiLogStdClip = "pi.log_std_clip_param_const";
        /// <summary>Critic and target networks, in a full (not inference-only) state: the actor does not need them.</summary>
        static readonly string[] Ignored = { "vf.", "encoder.critic_encoder.", "_old_encoder.", "_old_pi." };
        static readonly Regex LayerName = new Regex(@"^(\d{1,5})\.(weight|bias)$");

        sealed class Dense
        {
            public int Inputs, Outputs;
            public float[] Weight, Bias, NormWeight, NormBias;
            public Func<float, float> Activation;
        }

        readonly List<Dense> layers;
        readonly int boxSize;
        readonly float[] freeLogStd;
        readonly float logStdClip = float.PositiveInfinity;
        public readonly int ObservationSize, OutputSize;

        static float Sigmoid(float x) { return (float)(0.5 * (1 + Math.Tanh(0.5 * x))); }

        static Func<float, float> ActivationNamed(string name)
        {
            switch ((name ?? "linear").ToLowerInvariant())
            {
                case "linear": return null;
                case "tanh": return x => (float)Math.Tanh(x);
                case "relu": return x => x > 0 ? x : 0;
                case "elu": return x => x > 0 ? x : (float)(Math.Exp(x) - 1);
                case "sigmoid": return Sigmoid;
                case "silu": case "swish": return x => x * Sigmoid(x);
                default: throw new UnsupportedModelException("activation '" + name + "' is not one this client knows (linear, tanh, relu, elu, sigmoid, silu, swish)");
            }
        }

        static UnsupportedModelException Unsupported(string what)
        {
            return new UnsupportedModelException("not one of RLlib's default MLP RLModules for a Discrete or Box action space: " + what
                + " (served actions run any module)");
        }

        /// <exception cref="UnsupportedModelException">not such a module for that space (the message says why)</exception>
        public Mlp(Dictionary<string, NdArray> p, string fcnetActivation, string headFcnetActivation, ActionSpace space)
        {
            var encoders = new HashSet<string>();
            foreach (string name in p.Keys)
            {
                bool known = name.StartsWith(PiPrefix) || name == PiLogStd || name == PiLogStdClip || Ignored.Any(name.StartsWith);
                foreach (string prefix in EncoderPrefixes)
                    if (name.StartsWith(prefix)) { known = true; encoders.Add(prefix); }
                if (!known) throw Unsupported("unexpected parameter '" + (name.Length > 80 ? name.Substring(0, 80) : name) + "'");
            }
            if (encoders.Count != 1) throw Unsupported("expected MLP encoder parameters under exactly one of " + string.Join(" and ", EncoderPrefixes));
            var activation = ActivationNamed(fcnetActivation);
            var head = ActivationNamed(headFcnetActivation);
            layers = Read(p, encoders.First(), activation, fcnetActivation, activation);
            List<Dense> pi = Read(p, PiPrefix, head, headFcnetActivation, null);
            if (pi[0].Inputs != layers[layers.Count - 1].Outputs)
                throw Unsupported("the encoder puts out " + layers[layers.Count - 1].Outputs + " values but the pi head takes " + pi[0].Inputs);
            layers.AddRange(pi);
            ObservationSize = layers[0].Inputs;
            int outputs = pi[pi.Count - 1].Outputs;
            NdArray free;
            p.TryGetValue(PiLogStd, out free);
            if (space.IsDiscrete)
            {
                if (free != null) throw Unsupported("it has a free log-std ('" + PiLogStd + "'), which belongs to a Box action space, not " + space);
                if (outputs != space.N) throw Unsupported("the pi head puts out " + outputs + " logits, but the action space " + space + " needs " + space.N);
                OutputSize = outputs;
                return;
            }
            int size = space.Size;
            if (free != null && (outputs != size || free.Count != size)) throw Unsupported("a pi head with " + outputs + " outputs and a free log-std of " + free.Count + " values does not fit " + space);
            if (free == null && outputs != 2 * size) throw Unsupported("the pi head puts out " + outputs + " values, but " + space + " needs " + 2 * size + " (mean and log-std)");
            NdArray clip;
            if (!p.TryGetValue(PiLogStdClip, out clip) || clip.Count != 1) throw Unsupported("a Box action space needs a one-number '" + PiLogStdClip + "'");
            boxSize = size;
            logStdClip = clip.ToFloats()[0];
            if (free != null) freeLogStd = free.ToFloats().Select(x => Math.Min(Math.Max(x, -logStdClip), logStdClip)).ToArray();
            OutputSize = 2 * size;
        }

        /// <summary>The Linear [+ LayerNorm] layers under prefix, with between after all but the last and last after it.</summary>
        static List<Dense> Read(Dictionary<string, NdArray> p, string prefix, Func<float, float> between, string betweenName, Func<float, float> last)
        {
            var entries = new SortedDictionary<int, Dictionary<string, NdArray>>();
            foreach (var e in p)
            {
                if (!e.Key.StartsWith(prefix)) continue;
                Match m = LayerName.Match(e.Key.Substring(prefix.Length));
                if (!m.Success) throw Unsupported("unexpected parameter '" + e.Key + "'");
                int index = int.Parse(m.Groups[1].Value);
                if (!entries.ContainsKey(index)) entries[index] = new Dictionary<string, NdArray>();
                entries[index][m.Groups[2].Value] = e.Value;
            }
            if (entries.Count == 0) throw Unsupported("no layers under '" + prefix + "'");
            int end = entries.Keys.Max();
            var result = new List<Dense>();
            int used = 0, pos = 0;
            while (true)
            {
                NdArray weight = Get(entries, pos, "weight");
                if (weight == null || weight.Shape.Length != 2)
                    throw Unsupported("expected a Linear layer at " + prefix + pos + " with '" + betweenName + "' activations between layers");
                var dense = new Dense { Outputs = (int)weight.Shape[0], Inputs = (int)weight.Shape[1], Weight = weight.ToFloats() };
                if (result.Count > 0 && dense.Inputs != result[result.Count - 1].Outputs)
                    throw Unsupported(prefix + pos + ".weight takes " + dense.Inputs + " inputs, but the layer before puts out " + result[result.Count - 1].Outputs);
                NdArray bias = Get(entries, pos, "bias");
                if (bias != null)
                {
                    if (bias.Shape.Length != 1 || bias.Shape[0] != dense.Outputs) throw Unsupported(prefix + pos + ".bias does not have " + dense.Outputs + " entries");
                    dense.Bias = bias.ToFloats();
                }
                used++;
                pos++;
                NdArray normWeight = Get(entries, pos, "weight");
                if (normWeight != null && normWeight.Shape.Length == 1)
                {
                    NdArray normBias = Get(entries, pos, "bias");
                    if (normWeight.Shape[0] != dense.Outputs || normBias == null || normBias.Shape.Length != 1 || normBias.Shape[0] != dense.Outputs)
                        throw Unsupported("expected a LayerNorm of size " + dense.Outputs + " at " + prefix + pos);
                    dense.NormWeight = normWeight.ToFloats();
                    dense.NormBias = normBias.ToFloats();
                    used++;
                    pos++;
                }
                bool isLast = pos > end;
                dense.Activation = isLast ? last : between;
                result.Add(dense);
                if (isLast) break;
                if (between != null) pos++;  // the activation's own slot in torch's Sequential
            }
            if (used != entries.Count)
                throw Unsupported("parameters under '" + prefix + "' are not laid out as Linear layers with '" + betweenName + "' activations between them");
            return result;
        }

        static NdArray Get(SortedDictionary<int, Dictionary<string, NdArray>> entries, int pos, string leaf)
        {
            Dictionary<string, NdArray> layer;
            NdArray a;
            return entries.TryGetValue(pos, out layer) && layer.TryGetValue(leaf, out a) ? a : null;
        }

        /// <summary>The distribution inputs for one observation (float32 arithmetic, as torch's).</summary>
        public float[] Forward(float[] observation, int offset = 0)
        {
            var input = new float[ObservationSize];
            Array.Copy(observation, offset, input, 0, ObservationSize);
            foreach (Dense d in layers)
            {
                var output = new float[d.Outputs];
                for (int o = 0; o < d.Outputs; o++)
                {
                    float sum = d.Bias == null ? 0 : d.Bias[o];
                    int row = o * d.Inputs;
                    for (int i = 0; i < d.Inputs; i++) sum += d.Weight[row + i] * input[i];
                    output[o] = sum;
                }
                if (d.NormWeight != null)
                {
                    float mean = output.Average();
                    float variance = output.Select(x => (x - mean) * (x - mean)).Average();
                    float scale = (float)(1 / Math.Sqrt(variance + LayerNormEpsilon));
                    for (int o = 0; o < output.Length; o++) output[o] = (output[o] - mean) * scale * d.NormWeight[o] + d.NormBias[o];
                }
                if (d.Activation != null) for (int o = 0; o < output.Length; o++) output[o] = d.Activation(output[o]);
                input = output;
            }
            if (freeLogStd != null)
            {
                var output = new float[2 * boxSize];
                Array.Copy(input, output, boxSize);
                Array.Copy(freeLogStd, 0, output, boxSize, boxSize);
                return output;
            }
            for (int i = boxSize; i < 2 * boxSize; i++) input[i] = Math.Min(Math.Max(input[i], -logStdClip), logStdClip);
            return input;
        }
    }
}
