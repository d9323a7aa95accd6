// RLlink's message types and the fields each needs (PROTOCOL.md section 5).
//
// Validate() is the receiver's check of every decoded body: a map with a str
// type of a current message, with its required fields of the right types
// (an int is never a bool, never negative). Unknown fields are kept.
using System;
using System.Collections.Generic;

namespace Rlinks
{
    /// <summary>Every message type, spelled as on the wire.</summary>
    public static class MessageType
    {
        public const string Ping = "PING";
        public const string Episodes = "EPISODES";
        public const string GetState = "GET_STATE";
        public const string GetConfig = "GET_CONFIG";
        public const string EpisodesAndGetState = "EPISODES_AND_GET_STATE";
        public const string Pong = "PONG";
        public const string SetState = "SET_STATE";
        public const string SetConfig = "SET_CONFIG";
        public const string Error = "ERROR";
        public const string Ack = "ACK";
        public const string Auth = "AUTH";
        public const string AuthOk = "AUTH_OK";
        public const string GetEndpoints = "GET_ENDPOINTS";
        public const string Endpoints = "ENDPOINTS";
        public const string Act = "ACT";
        public const string Actions = "ACTIONS";
        public const string GetModules = "GET_MODULES";
        public const string Modules = "MODULES";
        public const string Samples = "SAMPLES";

        /// <summary>RLlib's old API stack: recognised, always refused.</summary>
        public static readonly string[] OldApi =
        {
            "ACTION_SPACE", "OBSERVATION_SPACE", "GET_WORKER_ARGS", "GET_WEIGHTS", "REPORT_SAMPLES",
            "START_EPISODE", "GET_ACTION", "LOG_ACTION", "LOG_RETURNS", "END_EPISODE",
        };

        /// <summary>The current types, for the test that holds them equal to Python's MessageType.</summary>
        public static readonly string[] Current =
        {
            Ping, Episodes, GetState, GetConfig, EpisodesAndGetState, Pong, SetState, SetConfig, Error, Ack, Auth,
            AuthOk, GetEndpoints, Endpoints, Act, Actions, GetModules, Modules, Samples,
        };
    }

    /// <summary>Making and checking messages.</summary>
    public static class Messages
    {
        enum Kind { Int, Str, Bin, Map, List, BinOrMap, ArrayOrList }

        static readonly Dictionary<string, KeyValuePair<string, Kind>[]> Required = new Dictionary<string, KeyValuePair<string, Kind>[]>
        {
            { MessageType.Ping, new KeyValuePair<string, Kind>[0] },
            { MessageType.Pong, new KeyValuePair<string, Kind>[0] },
            { MessageType.GetConfig, new KeyValuePair<string, Kind>[0] },
            { MessageType.GetState, new KeyValuePair<string, Kind>[0] },
            { MessageType.GetEndpoints, new KeyValuePair<string, Kind>[0] },
            { MessageType.SetConfig, Fields("config", Kind.BinOrMap) },
            { MessageType.SetState, Fields("state", Kind.Map) },
            { MessageType.Episodes, Fields("episodes", Kind.List) },
            { MessageType.EpisodesAndGetState, Fields("episodes", Kind.List) },
            { MessageType.Error, Fields("code", Kind.Str, "message", Kind.Str) },
            { MessageType.Ack, Fields("seq", Kind.Int) },
            { MessageType.Auth, Fields("proof", Kind.Bin) },
            { MessageType.AuthOk, Fields("proof", Kind.Bin) },
            { MessageType.Endpoints, Fields("endpoints", Kind.List) },
            { MessageType.Act, Fields("env", Kind.List, "obs", Kind.ArrayOrList, "reward", Kind.ArrayOrList, "start", Kind.ArrayOrList,
                                     "terminated", Kind.ArrayOrList, "truncated", Kind.ArrayOrList) },
            { MessageType.Actions, Fields("env", Kind.List, "actions", Kind.ArrayOrList, "weights_seq_no", Kind.Int) },
            { MessageType.GetModules, Fields("agents", Kind.List) },
            { MessageType.Modules, Fields("modules", Kind.Map) },
            { MessageType.Samples, Fields("samples", Kind.List) },
        };

        static readonly Dictionary<string, KeyValuePair<string, Kind>[]> Optional = new Dictionary<string, KeyValuePair<string, Kind>[]>
        {
            { MessageType.Ping, Fields("rlinks", Kind.Map) },
            { MessageType.Pong, Fields("rlinks", Kind.Map) },
            { MessageType.SetConfig, Fields("rlinks_config", Kind.Map) },
            { MessageType.SetState, Fields("want_steps", Kind.Int, "timestep", Kind.Int) },
            { MessageType.Episodes, Fields("timesteps", Kind.Int, "seq", Kind.Int) },
            { MessageType.EpisodesAndGetState, Fields("timesteps", Kind.Int, "seq", Kind.Int) },
            { MessageType.Samples, Fields("seq", Kind.Int) },
            { MessageType.Ack, Fields("weights_seq_no", Kind.Int) },
            { MessageType.Act, Fields("taken_mask", Kind.ArrayOrList, "taken", Kind.ArrayOrList, "train", Kind.ArrayOrList) },
        };

        static KeyValuePair<string, Kind>[] Fields(params object[] pairs)
        {
            var r = new KeyValuePair<string, Kind>[pairs.Length / 2];
            for (int i = 0; i < r.Length; i++) r[i] = new KeyValuePair<string, Kind>((string)pairs[2 * i], (Kind)pairs[2 * i + 1]);
            return r;
        }

        /// <summary>A message of <paramref name="type"/> with fields given as name, value pairs.</summary>
        public static MsgMap Make(string type, params object[] fields)
        {
            var m = new MsgMap().Set("type", type);
            for (int i = 0; i + 1 < fields.Length; i += 2) m.Set((string)fields[i], fields[i + 1]);
            return m;
        }

        /// <summary>The type of a decoded message that passes every check of section 5.</summary>
        /// <exception cref="InvalidMessageException">not a map, no str type, a field missing or of the wrong type</exception>
        /// <exception cref="UnsupportedMessageException">an unknown or old-API type</exception>
        public static string Validate(object decoded)
        {
            var m = decoded as MsgMap;
            if (m == null) throw new InvalidMessageException("a message must be a msgpack map, got " + TypeName(decoded));
            var type = m.Get("type") as string;
            if (type == null) throw new InvalidMessageException("a message must have a str field 'type'");
            if (Array.IndexOf(MessageType.OldApi, type) >= 0)
                throw new UnsupportedMessageException(type + " belongs to RLlib's old API stack and is not supported");
            KeyValuePair<string, Kind>[] required;
            if (!Required.TryGetValue(type, out required))
                throw new UnsupportedMessageException("unknown message type '" + (type.Length > 64 ? type.Substring(0, 64) : type) + "'");
            foreach (var field in required)
            {
                if (!m.Has(field.Key)) throw new InvalidMessageException(type + ": missing required field '" + field.Key + "'");
                Check(type, field.Key, m.Get(field.Key), field.Value);
            }
            KeyValuePair<string, Kind>[] optional;
            if (Optional.TryGetValue(type, out optional))
                foreach (var field in optional)
                    if (m.Has(field.Key)) Check(type, field.Key, m.Get(field.Key), field.Value);
            if (type == MessageType.Episodes || type == MessageType.EpisodesAndGetState)
            {
                var episodes = (List<object>)m.Get("episodes");
                for (int i = 0; i < episodes.Count; i++)
                    if (!(episodes[i] is MsgMap)) throw new InvalidMessageException(type + ": episodes[" + i + "] must be a map, got " + TypeName(episodes[i]));
            }
            return type;
        }

        static void Check(string type, string name, object value, Kind kind)
        {
            bool ok;
            switch (kind)
            {
                case Kind.Int: ok = value is long || value is ulong; break;
                case Kind.Str: ok = value is string; break;
                case Kind.Bin: ok = value is byte[]; break;
                case Kind.Map: ok = value is MsgMap; break;
                case Kind.List: ok = value is List<object>; break;
                case Kind.BinOrMap: ok = value is byte[] || value is MsgMap; break;
                default: ok = value is NdArray || value is List<object>; break;
            }
            if (!ok) throw new InvalidMessageException(type + ": field '" + name + "' must be " + kind + ", got " + TypeName(value));
            if (value is long && (long)value < 0) throw new InvalidMessageException(type + ": field '" + name + "' must not be negative, got " + value);
        }

        public static string TypeName(object v)
        {
            if (v == null) return "nil";
            if (v is long || v is ulong) return "int";
            if (v is double || v is float) return "float";
            if (v is string) return "str";
            if (v is byte[]) return "bin";
            if (v is List<object>) return "list";
            if (v is MsgMap) return "map";
            if (v is NdArray) return "ndarray";
            return v.GetType().Name;
        }
    }
}
