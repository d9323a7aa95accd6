// The weight set of SET_STATE (PROTOCOL.md section 8): parameter name -> array, and its version.
using System.Collections.Generic;

namespace Rlinks
{
    public sealed class WeightSet
    {
        public readonly Dictionary<string, NdArray> Params;
        public readonly long SeqNo;

        WeightSet(Dictionary<string, NdArray> p, long seqNo) { Params = p; SeqNo = seqNo; }

        /// <exception cref="InvalidMessageException">not a weight set of one module</exception>
        public static WeightSet Read(MsgMap state)
        {
            var module = state.Get("rl_module") as MsgMap;
            object seqNo = state.Get("weights_seq_no");
            if (module == null) throw Malformed("no 'rl_module' map of parameter names to arrays");
            if (!(seqNo is long) || (long)seqNo < 0) throw Malformed("'weights_seq_no' must be an int >= 0");
            if (module.Has("default_policy"))
            {
                if (module.Count != 1) throw Malformed("it holds modules other than 'default_policy'; only single-agent modules are supported");
                module = module.Get("default_policy") as MsgMap;
                if (module == null) throw Malformed("'default_policy' must map parameter names to arrays");
            }
            var p = new Dictionary<string, NdArray>();
            foreach (var e in module.Entries)
            {
                var name = e.Key as string;
                var array = e.Value as NdArray;
                if (name == null || array == null || !array.Dtype.IsNumeric) throw Malformed("parameter '" + e.Key + "' must be a numeric array");
                p[name] = array;
            }
            return new WeightSet(p, (long)seqNo);
        }

        /// <summary>A multi-agent weight set: every module id the runner serves -> its parameters (PROTOCOL.md 8).</summary>
        /// <exception cref="InvalidMessageException">not such a set</exception>
        public static Dictionary<string, WeightSet> ReadModules(MsgMap state)
        {
            var modules = state.Get("rl_module") as MsgMap;
            if (modules == null) throw Malformed("no 'rl_module' map of module ids to parameter maps");
            var r = new Dictionary<string, WeightSet>();
            foreach (var e in modules.Entries)
            {
                var one = e.Value as MsgMap;
                if (!(e.Key is string) || one == null) throw Malformed("module '" + e.Key + "' must map parameter names to arrays");
                r[(string)e.Key] = Read(new MsgMap().Set("rl_module", new MsgMap().Set("default_policy", one)).Set("weights_seq_no", state.Get("weights_seq_no")));
            }
            return r;
        }

        static InvalidMessageException Malformed(string why) { return new InvalidMessageException("malformed weight set: " + why); }
    }

    /// <summary>What a SET_STATE brought: the weights, and how many env steps the runner wants next (want_steps) or null.</summary>
    public sealed class WeightsUpdate
    {
        public WeightSet Weights;
        /// <summary>With multi_agent agreed: every module's weights (Weights is then null).</summary>
        public Dictionary<string, WeightSet> Modules;
        public long? WantSteps;
    }
}
