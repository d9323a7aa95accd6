// Runs tests/vectors/policy/ through this client's MLP and sampling, for tests/test_csharp_client.py.
//
//   mono policy_vectors.exe KIND FILE     KIND: mlp, logp or action_for_env; FILE: the vector file as msgpack
//
// The test hands each JSON file over as msgpack (this client reads that with
// its own codec) and compares the JSON lines written here, one per case,
// with the file's numbers (to float32 rounding).
using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Linq;
using Rlinks;

static class PolicyVectors
{
    static int Main(string[] args)
    {
        var spec = (MsgMap)MsgPack.Decode(File.ReadAllBytes(args[1]));
        var cases = (List<object>)spec.Get("cases");
        foreach (MsgMap c in cases)
        {
            ActionSpace space = RunnerConfig.ReadActionSpace((MsgMap)c.Get("action_space"));
            switch (args[0])
            {
                case "mlp":
                    Mlp mlp = Network(c, space, Params((MsgMap)c.Get("params"), new List<object>()));
                    var outputs = ((List<object>)c.Get("observations")).Select(o => Numbers(o)).Select(o => Json(mlp.Forward(o)));
                    Console.WriteLine("{\"name\": \"" + c.Get("name") + "\", \"dist_inputs\": [" + string.Join(", ", outputs) + "]}");
                    break;
                case "logp":
                    float[] dist = Numbers(c.Get("dist_inputs"));
                    object action = c.Get("action");
                    float logp = space.IsDiscrete ? Sampling.CategoricalLogp(dist, (long)action) : Sampling.GaussianLogp(dist, Numbers(action));
                    Console.WriteLine("{\"logp\": " + logp.ToString("R", CultureInfo.InvariantCulture) + "}");
                    break;
                default:
                    float[] env = Sampling.ForEnv(Numbers(c.Get("sampled")), space, (bool)c.Get("normalize"), (bool)c.Get("clip"));
                    Console.WriteLine("{\"for_env\": " + Json(env) + "}");
                    break;
            }
        }
        if (args[0] == "mlp")
        {
            foreach (MsgMap r in (List<object>)spec.Get("refused"))
            {
                MsgMap of = cases.Cast<MsgMap>().First(c => (string)c.Get("name") == (string)r.Get("params_of"));
                try
                {
                    Network(of, RunnerConfig.ReadActionSpace((MsgMap)r.Get("action_space")), Params((MsgMap)of.Get("params"), (List<object>)r.Get("drop")));
                    Console.WriteLine("{\"name\": \"" + r.Get("name") + "\", \"refused\": null}");
                }
                catch (UnsupportedModelException e)
                {
                    Console.WriteLine("{\"name\": \"" + r.Get("name") + "\", \"refused\": \"" + e.Message.Replace("\\", "\\\\").Replace("\"", "\\\"") + "\"}");
                }
            }
        }
        return 0;
    }

    static Mlp Network(MsgMap c, ActionSpace space, Dictionary<string, NdArray> p)
    {
        return new Mlp(p, (string)c.Get("fcnet_activation"), (string)c.Get("head_fcnet_activation"), space);
    }

    static Dictionary<string, NdArray> Params(MsgMap given, List<object> drop)
    {
        var p = new Dictionary<string, NdArray>();
        foreach (var e in given.Entries)
        {
            if (drop.Contains(e.Key)) continue;
            var m = (MsgMap)e.Value;
            long[] shape = ((List<object>)m.Get("shape")).Select(d => (long)d).ToArray();
            p[(string)e.Key] = NdArray.Of(Numbers(m.Get("data")), shape);
        }
        return p;
    }

    static float[] Numbers(object list) { return ((List<object>)list).Select(x => Convert.ToSingle(x, CultureInfo.InvariantCulture)).ToArray(); }

    static string Json(float[] xs) { return "[" + string.Join(", ", xs.Select(x => ((double)x).ToString("R", CultureInfo.InvariantCulture))) + "]"; }
}
