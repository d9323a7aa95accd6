// rlinks' extensions (PROTOCOL.md section 10): offered in PING's "rlinks" map, agreed in PONG's.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Rlinks
{
    /// <summary>Names of the extensions of version 1, spelled as on the wire.</summary>
    public static class Extension
    {
        public const string WantSteps = "want_steps";
        public const string Ack = "ack";
        public const string Auth = "auth";
        public const string Endpoints = "endpoints";
        public const string ServedActions = "served_actions";
        public const string ServedTaken = "served_taken";
        public const string PolicyGraph = "policy_graph";
        public const string MultiAgent = "multi_agent";
        public const string Takeover = "takeover";
        public const string Timestep = "timestep";
        public const string Samples = "samples";
        public const string WeightsNotice = "weights_notice";

        /// <summary>Every name, for the test that holds them equal to Python's Extension.</summary>
        public static readonly string[] All =
        {
            WantSteps, Ack, Auth, Endpoints, ServedActions, ServedTaken, PolicyGraph, MultiAgent, Takeover, Timestep,
            Samples, WeightsNotice,
        };
    }

    /// <summary>An offer or an answer: the "rlinks" map of a PING or PONG.</summary>
    public sealed class Offer
    {
        public const int Version = 1;
        public const string Key = "rlinks";
        const int MaxNames = 64, MaxNameChars = 64, MaxAgentChars = 128;

        public readonly HashSet<string> Extensions;
        public readonly string Agent;
        /// <summary>The whole map, for keys such as role and auth_nonce.</summary>
        public readonly MsgMap Map;

        Offer(HashSet<string> extensions, string agent, MsgMap map) { Extensions = extensions; Agent = agent; Map = map; }

        /// <summary>The map a client's PING carries: version, extensions (sorted, once each), agent, then <paramref name="extra"/>.</summary>
        public static MsgMap Make(IEnumerable<string> extensions, string agent, params object[] extra)
        {
            var names = new List<object>();
            foreach (var name in extensions.Distinct().OrderBy(n => n, StringComparer.Ordinal)) names.Add(name);
            var map = new MsgMap().Set("version", (long)Version).Set("extensions", names);
            if (!string.IsNullOrEmpty(agent)) map.Set("agent", agent);
            for (int i = 0; i + 1 < extra.Length; i += 2) map.Set((string)extra[i], extra[i + 1]);
            return map;
        }

        /// <summary>The offer in a PING or PONG, or null for a bare one (RLlib's: plain RLlink).</summary>
        /// <exception cref="InvalidMessageException">a malformed offer</exception>
        public static Offer Parse(MsgMap message)
        {
            object raw = message.Get(Key);
            if (raw == null) return null;
            var map = raw as MsgMap;
            if (map == null) throw new InvalidMessageException("'rlinks' must be a map");
            object version = map.Get("version");
            if (!(version is long) || (long)version < 1) throw new InvalidMessageException("'rlinks.version' must be a positive int");
            var names = new HashSet<string>();
            object list = map.Get("extensions");
            if (list != null)
            {
                var items = list as List<object>;
                if (items == null || items.Count > MaxNames) throw new InvalidMessageException("'rlinks.extensions' must be a list of at most " + MaxNames + " names");
                foreach (object item in items)
                {
                    var name = item as string;
                    if (name == null || name.Length == 0 || name.Length > MaxNameChars) throw new InvalidMessageException("'rlinks.extensions' must hold non-empty short strings");
                    names.Add(name);
                }
            }
            object agent = map.Get("agent") ?? "";
            if (!(agent is string)) throw new InvalidMessageException("'rlinks.agent' must be a string");
            var text = (string)agent;
            return new Offer(names, text.Length > MaxAgentChars ? text.Substring(0, MaxAgentChars) : text, map);
        }

        /// <summary>What both sides agreed to: the answer's names that were offered (weights_notice only with ack).</summary>
        public static HashSet<string> Agreed(Offer answer, ICollection<string> offered)
        {
            var agreed = new HashSet<string>();
            if (answer == null) return agreed;
            foreach (var name in answer.Extensions) if (offered.Contains(name)) agreed.Add(name);
            if (!agreed.Contains(Extension.Ack)) agreed.Remove(Extension.WeightsNotice);
            return agreed;
        }
    }
}
