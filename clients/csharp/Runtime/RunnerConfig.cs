// What SET_CONFIG says (PROTOCOL.md section 9): the spaces, the batch size, on- or off-policy, the model.
using System;
using System.Collections.Generic;

namespace Rlinks
{
    /// <summary>A Discrete (N actions) or Box (Shape, Low, High) action space.</summary>
    public sealed class ActionSpace
    {
        public readonly bool IsDiscrete;
        public readonly int N;
        public readonly long[] Shape;
        public readonly float[] Low, High;

        ActionSpace(bool discrete, int n, long[] shape, float[] low, float[] high) { IsDiscrete = discrete; N = n; Shape = shape; Low = low; High = high; }

        public static ActionSpace Discrete(int n)
        {
            if (n < 1) throw new UsageException("a Discrete action space needs n >= 1");
            return new ActionSpace(true, n, new long[0], null, null);
        }

        public static ActionSpace Box(long[] shape, float[] low, float[] high)
        {
            int size = 1;
            foreach (long d in shape) size *= (int)d;
            if (shape.Length == 0 || size < 1) throw new UsageException("a Box action space needs a shape of positive ints");
            return new ActionSpace(false, 0, shape, Fill(low, size, float.NegativeInfinity), Fill(high, size, float.PositiveInfinity));
        }

        static float[] Fill(float[] values, int size, float fallback)
        {
            if (values == null || values.Length == 0) values = new[] { fallback };
            if (values.Length == 1) { var v = new float[size]; for (int i = 0; i < size; i++) v[i] = values[0]; return v; }
            if (values.Length != size) throw new UsageException("a Box's bounds need 1 or " + size + " values, got " + values.Length);
            return values;
        }

        /// <summary>Values of one Box action (0 for Discrete).</summary>
        public int Size { get { return IsDiscrete ? 0 : Low.Length; } }

        /// <summary>How many distribution inputs a policy puts out: logits, or means and log-stds.</summary>
        public int DistInputs { get { return IsDiscrete ? N : 2 * Size; } }

        public override string ToString() { return IsDiscrete ? "Discrete(" + N + ")" : "Box(shape=[" + string.Join(", ", Shape) + "])"; }
    }

    public sealed class RunnerConfig
    {
        public string Algorithm = "";
        /// <summary>The observation's shape (a flat Box: [size]) and its dtype.</summary>
        public long[] ObservationShape;
        public string ObservationDtype = "<f4";
        public ActionSpace ActionSpace;
        public long RolloutFragmentLength;
        public bool OnPolicy = true;
        public string FcnetActivation = "tanh";
        public string HeadFcnetActivation = "relu";
        /// <summary>Off-policy, a pacing runner's batches per client per sample(): sent and unconfirmed at most (0: not said).</summary>
        public long PacedInFlight;
        /// <summary>A multi-agent runner's modules and mapping (PROTOCOL.md 9), or null.</summary>
        public MultiAgentConfig MultiAgent;

        public int ObservationSize
        {
            get { long n = 1; foreach (long d in ObservationShape) n *= d; return (int)n; }
        }

        /// <summary>The description in a SET_CONFIG (config if a map, else rlinks_config); null for RLlib's pickle alone.</summary>
        /// <exception cref="InvalidMessageException">a malformed description, or spaces this client has no form for</exception>
        public static RunnerConfig Read(MsgMap setConfig)
        {
            var d = setConfig.Get("config") as MsgMap ?? setConfig.Get("rlinks_config") as MsgMap;
            if (d == null) return null;
            var c = new RunnerConfig();
            c.Algorithm = d.Get("algorithm") as string ?? "";
            var obs = d.Get("observation_space") as MsgMap;
            if (obs == null || (obs.Get("kind") as string) != "box")
                throw Malformed("this client takes a Box observation space (a vector), not " + Describe(obs));
            c.ObservationShape = Shape(obs.Get("shape"), "observation_space");
            c.ObservationDtype = obs.Get("dtype") as string ?? "<f4";
            c.ActionSpace = ReadActionSpace(d.Get("action_space") as MsgMap);
            object fragment = d.Get("rollout_fragment_length");
            if (!(fragment is long) || (long)fragment < 1) throw Malformed("'rollout_fragment_length' must be an int >= 1");
            c.RolloutFragmentLength = (long)fragment;
            if (d.Get("on_policy") is bool) c.OnPolicy = (bool)d.Get("on_policy");
            if (d.Get("paced_in_flight") is long && (long)d.Get("paced_in_flight") >= 1) c.PacedInFlight = (long)d.Get("paced_in_flight");
            var multi = d.Get("multi_agent") as MsgMap;
            if (multi != null) c.MultiAgent = ReadMultiAgent(multi);
            var model = d.Get("model_config") as MsgMap;
            if (model != null)
            {
                if (model.Get("fcnet_activation") is string) c.FcnetActivation = (string)model.Get("fcnet_activation");
                if (model.Get("head_fcnet_activation") is string) c.HeadFcnetActivation = (string)model.Get("head_fcnet_activation");
            }
            return c;
        }

        static MultiAgentConfig ReadMultiAgent(MsgMap multi)
        {
            var config = new MultiAgentConfig();
            var modules = multi.Get("modules") as MsgMap;
            if (modules == null || modules.Count == 0) throw Malformed("multi_agent.modules must map module ids to their spaces");
            foreach (var e in modules.Entries)
            {
                var spec = e.Value as MsgMap;
                var obs = spec == null ? null : spec.Get("observation_space") as MsgMap;
                if (!(e.Key is string) || obs == null || (obs.Get("kind") as string) != "box")
                    throw Malformed("multi_agent.modules['" + e.Key + "']: this client takes a Box observation space (a vector)");
                config.Modules[(string)e.Key] = new ModuleSpec
                {
                    ObservationShape = Shape(obs.Get("shape"), "multi_agent.modules['" + e.Key + "'].observation_space"),
                    ActionSpace = ReadActionSpace(spec.Get("action_space") as MsgMap),
                    Trained = !(spec.Get("trained") is bool) || (bool)spec.Get("trained"),
                };
            }
            var table = multi.Get("agent_mapping") as List<object>;
            if (table != null) config.Mapping = new AgentMapping(table);
            var count = multi.Get("count_steps_by") as string;
            if (count != null && count != MultiAgentConfig.EnvSteps && count != MultiAgentConfig.AgentSteps)
                throw Malformed("multi_agent.count_steps_by must be 'env_steps' or 'agent_steps'");
            if (count != null) config.CountStepsBy = count;
            return config;
        }

        /// <summary>A Discrete or Box action space as section 9 describes it.</summary>
        /// <exception cref="InvalidMessageException">another kind, or a malformed one</exception>
        public static ActionSpace ReadActionSpace(MsgMap act)
        {
            string kind = act == null ? null : act.Get("kind") as string;
            if (kind == "discrete")
            {
                if (!(act.Get("n") is long) || (long)act.Get("n") < 1) throw Malformed("action_space: discrete needs an int n >= 1");
                if (act.Get("start") is long && (long)act.Get("start") != 0) throw Malformed("action_space: a Discrete space that does not start at 0");
                return ActionSpace.Discrete((int)(long)act.Get("n"));
            }
            if (kind == "box")
                return ActionSpace.Box(Shape(act.Get("shape"), "action_space"), Bound(act.Get("low"), float.NegativeInfinity), Bound(act.Get("high"), float.PositiveInfinity));
            throw Malformed("this client takes a Discrete or Box action space, not " + Describe(act));
        }

        static long[] Shape(object value, string what)
        {
            var list = value as List<object>;
            if (list == null) throw Malformed(what + " needs 'shape', a list of ints >= 0");
            var shape = new long[list.Count];
            for (int i = 0; i < shape.Length; i++)
            {
                if (!(list[i] is long) || (long)list[i] < 0) throw Malformed(what + " needs 'shape', a list of ints >= 0");
                shape[i] = (long)list[i];
            }
            return shape;
        }

        static float[] Bound(object value, float unbounded)
        {
            var array = value as NdArray;
            if (array != null) return array.ToFloats();
            var list = value as List<object>;
            if (list == null) return null;
            var r = new float[list.Count];
            for (int i = 0; i < r.Length; i++) r[i] = list[i] == null ? unbounded : Convert.ToSingle(list[i]);
            return r;
        }

        static string Describe(MsgMap space) { return space == null ? "none" : "a '" + space.Get("kind") + "' space"; }

        static InvalidMessageException Malformed(string why) { return new InvalidMessageException("SET_CONFIG description: " + why); }
    }
}
