// Drawing actions from a policy's distribution inputs, as RLlib's exploration does, and their log-probabilities.
//
// Discrete: Categorical(logits). Box: a diagonal Gaussian of means and
// log-stds; the sample is what RLlib trains on, and the env gets it
// unsquashed from [-1, 1] to the bounds (RLlib's normalize_actions) and
// clipped. A simulator's own Box action goes the other way (LogAction).
using System;
using System.Linq;

namespace Rlinks
{
    /// <summary>An action: Index for a Discrete space, Box (as the env applies it) for a Box space.</summary>
    public sealed class EnvAction
    {
        public readonly long Index;
        public readonly float[] Box;

        EnvAction(long index, float[] box) { Index = index; Box = box; }

        public static EnvAction OfIndex(long index) { return new EnvAction(index, null); }
        public static EnvAction OfBox(float[] values) { return new EnvAction(0, (float[])values.Clone()); }

        public bool IsDiscrete { get { return Box == null; } }
        public override string ToString() { return Box == null ? Index.ToString() : "[" + string.Join(", ", Box) + "]"; }
    }

    /// <summary>One step's choice: the action as recorded (RLlib's form), as the env applies it, and its log-probability.</summary>
    public sealed class Choice
    {
        public long Index;
        public float[] Recorded;
        public EnvAction Applied;
        public float Logp;
    }

    public static class Sampling
    {
        const double HalfLogTwoPi = 0.9189385332046727;

        static double CheckedMax(float[] values, int from, int count, string what)
        {
            double largest = double.NegativeInfinity;
            for (int i = from; i < from + count; i++)
            {
                if (float.IsNaN(values[i]) || float.IsInfinity(values[i]))
                    throw new UsageException("the policy put out a non-finite " + what + " (NaN or inf in the observation or the weights)");
                largest = Math.Max(largest, values[i]);
            }
            return largest;
        }

        /// <summary>A draw (or with explore false the most likely class, logp 0) from Categorical(logits).</summary>
        public static Choice Categorical(float[] logits, Random random, bool explore)
        {
            double largest = CheckedMax(logits, 0, logits.Length, "logit");
            if (!explore)
            {
                int best = 0;
                for (int i = 1; i < logits.Length; i++) if (logits[i] > logits[best]) best = i;
                return new Choice { Index = best, Applied = EnvAction.OfIndex(best), Logp = 0 };
            }
            var cumulative = new double[logits.Length];
            double total = 0;
            for (int i = 0; i < logits.Length; i++) cumulative[i] = total += Math.Exp(logits[i] - largest);
            double u = random.NextDouble() * total;
            int action = 0;
            while (action + 1 < logits.Length && cumulative[action] <= u) action++;
            return new Choice { Index = action, Applied = EnvAction.OfIndex(action), Logp = (float)(logits[action] - largest - Math.Log(total)) };
        }

        /// <summary>log-probability of <paramref name="action"/> under Categorical(logits).</summary>
        public static float CategoricalLogp(float[] logits, long action)
        {
            if (action < 0 || action >= logits.Length) throw new UsageException("action " + action + " is not in 0.." + (logits.Length - 1));
            double largest = CheckedMax(logits, 0, logits.Length, "logit");
            double total = 0;
            foreach (float x in logits) total += Math.Exp(x - largest);
            return (float)(logits[action] - largest - Math.Log(total));
        }

        /// <summary>log-probability of a recorded Box action under the Gaussian of means then log-stds.</summary>
        public static float GaussianLogp(float[] distInputs, float[] action)
        {
            int size = distInputs.Length / 2;
            if (action.Length != size) throw new UsageException("a Box action of " + action.Length + " values, expected " + size);
            double logp = 0;
            for (int i = 0; i < size; i++)
            {
                double logStd = distInputs[size + i];
                double z = (action[i] - distInputs[i]) / Math.Exp(logStd);
                logp += -0.5 * z * z - logStd - HalfLogTwoPi;
            }
            return (float)logp;
        }

        /// <summary>A draw (or with explore false the means, logp 0) from the Gaussian, unsquashed to the space.</summary>
        public static Choice Gaussian(float[] distInputs, ActionSpace space, Random random, bool explore, bool normalize = true, bool clip = false)
        {
            CheckedMax(distInputs, 0, distInputs.Length, "mean or log-std");
            int size = distInputs.Length / 2;
            var sample = new float[size];
            for (int i = 0; i < size; i++)
                sample[i] = explore ? (float)(distInputs[i] + Math.Exp(distInputs[size + i]) * Normal(random)) : distInputs[i];
            return new Choice { Recorded = sample, Applied = EnvAction.OfBox(ForEnv(sample, space, normalize, clip)), Logp = explore ? GaussianLogp(distInputs, sample) : 0 };
        }

        static double Normal(Random random)
        {
            double u = 1.0 - random.NextDouble();
            return Math.Sqrt(-2 * Math.Log(u)) * Math.Cos(2 * Math.PI * random.NextDouble());
        }

        static bool Bounded(ActionSpace space)
        {
            for (int i = 0; i < space.Size; i++)
                if (float.IsInfinity(space.Low[i]) || float.IsInfinity(space.High[i]) || float.IsNaN(space.Low[i]) || float.IsNaN(space.High[i])) return false;
            return true;
        }

        /// <summary>
        /// A recorded Box action as the env gets it, as RLlib's env runners hand it over: with normalize (RLlib's
        /// normalize_actions, the default) from [-1, 1] to the bounds and clipped there, when every bound is
        /// finite (else as it is); without normalize, clipped to the bounds given when clip (clip_actions).
        /// </summary>
        public static float[] ForEnv(float[] recorded, ActionSpace space, bool normalize = true, bool clip = false)
        {
            var r = (float[])recorded.Clone();
            bool bounded = Bounded(space);
            for (int i = 0; i < r.Length; i++)
            {
                float low = space.Low[i], high = space.High[i];
                if (normalize && bounded) r[i] = Math.Min(Math.Max(low + (recorded[i] + 1f) * (high - low) / 2f, low), high);
                else if (!normalize && clip) r[i] = Math.Min(Math.Max(recorded[i], float.IsNaN(low) ? float.NegativeInfinity : low), float.IsNaN(high) ? float.PositiveInfinity : high);
            }
            return r;
        }

        /// <summary>A Box action as the env applies it, clipped to the bounds, back into the form RLlib trains on ([-1, 1] with normalize).</summary>
        public static float[] Recorded(float[] applied, ActionSpace space, bool normalize = true)
        {
            var r = new float[applied.Length];
            bool bounded = Bounded(space);
            for (int i = 0; i < r.Length; i++)
            {
                float low = space.Low[i], high = space.High[i];
                float x = Math.Min(Math.Max(applied[i], low), high);
                r[i] = normalize && bounded ? Math.Min(Math.Max(2f * (x - low) / (high - low) - 1f, -1f), 1f) : x;
            }
            return r;
        }

        /// <summary>Whether <paramref name="action"/> is one of <paramref name="space"/>.</summary>
        /// <exception cref="UsageException">it is not (the message says why)</exception>
        public static void Check(EnvAction action, ActionSpace space)
        {
            if (space.IsDiscrete)
            {
                if (!action.IsDiscrete) throw new UsageException("a Box action for the Discrete space " + space);
                if (action.Index < 0 || action.Index >= space.N) throw new UsageException("action " + action.Index + " is not in 0.." + (space.N - 1));
                return;
            }
            if (action.IsDiscrete || action.Box.Length != space.Size || action.Box.Any(float.IsNaN))
                throw new UsageException("the action " + action + " is not one of " + space + " (" + space.Size + " values, no NaN)");
        }

        /// <summary>The recorded form of an action the simulator chose itself, and the policy's log-probability of it.</summary>
        /// <exception cref="UsageException">not an action of the space</exception>
        public static Choice Logged(float[] distInputs, ActionSpace space, EnvAction action, bool normalize = true)
        {
            Check(action, space);
            if (space.IsDiscrete) return new Choice { Index = action.Index, Applied = action, Logp = CategoricalLogp(distInputs, action.Index) };
            float[] recorded = Recorded(action.Box, space, normalize);
            var applied = new float[action.Box.Length];
            for (int i = 0; i < applied.Length; i++) applied[i] = Math.Min(Math.Max(action.Box[i], space.Low[i]), space.High[i]);
            return new Choice { Recorded = recorded, Applied = EnvAction.OfBox(applied), Logp = GaussianLogp(distInputs, recorded) };
        }
    }
}
