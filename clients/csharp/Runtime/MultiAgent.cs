// Many agents, several policies (PROTOCOL.md 7.6, 9 and 10.6: the multi_agent extension).
//
// AgentMapping is the runner's table of who acts with which module (the
// first row whose shell-style pattern matches the agent id). The
// MultiAgentEpisodeBuilder turns a multi-agent env's ticks (dicts by agent
// id, "__all__" for the whole episode) into multi-agent chunks, by RLlib's
// MultiAgentEnv rules: an agent acts on a tick when it got an observation
// on the tick before; its step is complete when its next observation
// arrives, with the rewards of every tick in between summed; an agent that
// appears joins, one that is terminated or truncated leaves (with its final
// observation, or its last one when none comes) and may not come back. A
// cut leaves an action still waiting for its observation for the next
// chunk. The C# side of protocol/multi_agent_builder.py.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Text;
using System.Text.RegularExpressions;

namespace Rlinks
{
    /// <summary>Agent id -> module id by the first matching row of shell-style patterns (*, ?, [..]; case-sensitive).</summary>
    public sealed class AgentMapping
    {
        /// <summary>Rows a table may have at most (PROTOCOL.md 12).</summary>
        public const int MaxRows = 256;
        readonly List<KeyValuePair<Regex, string>> rows = new List<KeyValuePair<Regex, string>>();

        /// <exception cref="InvalidMessageException">not a list of at most 256 [pattern, module_id] pairs of str</exception>
        public AgentMapping(List<object> table)
        {
            if (table.Count > MaxRows) throw new InvalidMessageException("agent_mapping: more than " + MaxRows + " rows");
            foreach (object row in table)
            {
                var pair = row as List<object>;
                if (pair == null || pair.Count != 2 || !(pair[0] is string) || !(pair[1] is string))
                    throw new InvalidMessageException("agent_mapping: each row must be [pattern, module_id], two strs");
                rows.Add(new KeyValuePair<Regex, string>(Glob((string)pair[0]), (string)pair[1]));
            }
        }

        /// <summary>The module of <paramref name="agentId"/>, or null when no row matches.</summary>
        public string Find(string agentId)
        {
            foreach (var row in rows) if (row.Key.IsMatch(agentId)) return row.Value;
            return null;
        }

        /// <summary>fnmatch's translation: * any run, ? one char, [..] a class ([!..] negated), the rest literal.</summary>
        static Regex Glob(string pattern)
        {
            var r = new StringBuilder("^");
            for (int i = 0; i < pattern.Length; i++)
            {
                char c = pattern[i];
                if (c == '*') r.Append(".*");
                else if (c == '?') r.Append('.');
                else if (c == '[')
                {
                    int end = pattern.IndexOf(']', i + 2 <= pattern.Length ? i + 2 : pattern.Length);
                    if (end < 0) { r.Append("\\["); continue; }
                    string inside = pattern.Substring(i + 1, end - i - 1).Replace("\\", "\\\\");
                    if (inside.StartsWith("!")) inside = "^" + inside.Substring(1);
                    else if (inside.StartsWith("^")) inside = "\\" + inside;
                    r.Append('[').Append(inside).Append(']');
                    i = end;
                }
                else r.Append(Regex.Escape(c.ToString()));
            }
            return new Regex(r.Append("$").ToString(), RegexOptions.Singleline | RegexOptions.CultureInvariant);
        }
    }

    /// <summary>One module of a multi-agent runner: its spaces.</summary>
    public sealed class ModuleSpec
    {
        public long[] ObservationShape;
        public ActionSpace ActionSpace;
        public bool Trained = true;

        public int ObservationSize { get { long n = 1; foreach (long d in ObservationShape) n *= d; return (int)n; } }
    }

    /// <summary>What a multi-agent runner's SET_CONFIG says besides the single-agent keys.</summary>
    public sealed class MultiAgentConfig
    {
        public const string EnvSteps = "env_steps", AgentSteps = "agent_steps";
        public Dictionary<string, ModuleSpec> Modules = new Dictionary<string, ModuleSpec>();
        /// <summary>The runner's table, or null: its mapping is a Python function, asked with GET_MODULES.</summary>
        public AgentMapping Mapping;
        public string CountStepsBy = EnvSteps;
    }

    public sealed class MultiAgentEpisodeBuilder
    {
        /// <summary>The key of the done dicts that ends the whole episode.</summary>
        public const string All = "__all__";

        sealed class AgentState
        {
            public EpisodeBuilder Builder;
            public string Module;
            public List<long> Ticks = new List<long>();
            public float[] LastObs;
            public Choice Action;
            public float[] Dist;
            public bool Acting, Done;
            public float Reward;
        }

        sealed class Episode
        {
            public string Id = Guid.NewGuid().ToString("N");
            public long EnvTStarted, EnvT, StepsSinceCut;
            public readonly Dictionary<string, AgentState> Agents = new Dictionary<string, AgentState>();
            public readonly HashSet<string> Left = new HashSet<string>();
        }

        readonly Func<string, ModuleSpec> specOf;
        readonly Func<string, string> moduleOf;
        readonly bool countAgentSteps;
        Episode episode;
        readonly List<MsgMap> finished = new List<MsgMap>();
        long finishedEnvSteps, finishedAgentSteps;

        /// <param name="moduleOf">agent id -> module id</param>
        /// <param name="specOf">module id -> its spaces</param>
        public MultiAgentEpisodeBuilder(Func<string, string> moduleOf, Func<string, ModuleSpec> specOf, string countStepsBy)
        {
            this.moduleOf = moduleOf;
            this.specOf = specOf;
            countAgentSteps = countStepsBy == MultiAgentConfig.AgentSteps;
        }

        public bool Running { get { return episode != null; } }

        /// <summary>Steps collected and not yet taken, counted as the runner counts them.</summary>
        public long NumSteps
        {
            get
            {
                if (countAgentSteps) return finishedAgentSteps + (episode == null ? 0 : episode.StepsSinceCut);
                return finishedEnvSteps + (episode == null ? 0 : episode.EnvT - episode.EnvTStarted);
            }
        }

        /// <summary>The agents that got an observation on the last tick and act on the next, with that observation.</summary>
        public Dictionary<string, float[]> ObservationsToAct()
        {
            var r = new Dictionary<string, float[]>();
            if (episode != null)
                foreach (var e in episode.Agents) if (!e.Value.Done && !e.Value.Acting) r[e.Key] = e.Value.LastObs;
            return r;
        }

        public string ModuleOfAgent(string agentId) { return episode.Agents[agentId].Module; }

        /// <summary>Starts an episode with the agents in <paramref name="obs"/> (a running one ends as truncated).</summary>
        public void Reset(IDictionary<string, float[]> obs)
        {
            if (episode != null) End(false, true);
            episode = new Episode();
            foreach (var e in obs) Join(e.Key, e.Value);
        }

        /// <summary>Records the actions an agent chose, before the env steps.</summary>
        /// <exception cref="UsageException">actions for other agents than those due to act</exception>
        public void Acted(IDictionary<string, KeyValuePair<Choice, float[]>> actions)
        {
            var due = ObservationsToAct().Keys;
            if (!new HashSet<string>(actions.Keys).SetEquals(due))
                throw new UsageException("actions must name exactly the agents that got an observation last tick: due [" + string.Join(", ", due) + "], got [" + string.Join(", ", actions.Keys) + "]");
            foreach (var e in actions)
            {
                AgentState a = episode.Agents[e.Key];
                a.Action = e.Value.Key;
                a.Dist = e.Value.Value;
                a.Acting = true;
            }
        }

        /// <summary>One env tick: the rewards, observations and done flags the env gave after the actions.</summary>
        /// <exception cref="UsageException">a reward for an agent not in the episode, a non-finite one, an agent coming back</exception>
        public void Step(IDictionary<string, float> rewards, IDictionary<string, float[]> obs, IDictionary<string, bool> terminateds, IDictionary<string, bool> truncateds)
        {
            if (episode == null) throw new UsageException("a report without an episode: ActAgents() starts one");
            foreach (var e in rewards)
            {
                AgentState a;
                if (!episode.Agents.TryGetValue(e.Key, out a) || a.Done) throw new UsageException("reward for agent '" + e.Key + "', which is not in the episode");
                if (float.IsNaN(e.Value) || float.IsInfinity(e.Value)) throw new UsageException("agent '" + e.Key + "': the reward " + e.Value + " is not finite");
                a.Reward += e.Value;
            }
            episode.EnvT++;
            bool allTerminated = Flag(terminateds, All), allTruncated = Flag(truncateds, All);
            foreach (var e in obs)
            {
                AgentState a;
                if (!episode.Agents.TryGetValue(e.Key, out a))
                {
                    if (episode.Left.Contains(e.Key)) throw new UsageException("agent '" + e.Key + "' left the episode and may not come back");
                    Join(e.Key, e.Value);
                    continue;
                }
                if (a.Done) throw new UsageException("agent '" + e.Key + "' left the episode and may not come back");
                if (!a.Acting) throw new UsageException("agent '" + e.Key + "' got an observation without having acted on its last one");
                Complete(a, e.Value, Flag(terminateds, e.Key) || allTerminated, Flag(truncateds, e.Key) || allTruncated);
            }
            foreach (string id in Keys(terminateds).Union(Keys(truncateds)))
            {
                AgentState a;
                if (id == All || obs.ContainsKey(id) || !episode.Agents.TryGetValue(id, out a) || a.Done) continue;
                if (Flag(terminateds, id) || Flag(truncateds, id)) Leave(a, Flag(terminateds, id), Flag(truncateds, id));
            }
            if (allTerminated || allTruncated) End(allTerminated, allTruncated);
        }

        /// <summary>Every chunk finished since the last call; the running episode cut (each agent at its latest observation).</summary>
        public List<MsgMap> TakeChunks()
        {
            if (episode != null && episode.StepsSinceCut > 0)
            {
                Emit(false, false);
                episode.EnvTStarted = episode.EnvT;
                episode.StepsSinceCut = 0;
                foreach (string id in episode.Agents.Where(e => e.Value.Done).Select(e => e.Key).ToList())
                {
                    episode.Agents.Remove(id);  // their last chunk went
                    episode.Left.Add(id);
                }
            }
            var r = new List<MsgMap>(finished);
            finished.Clear();
            finishedEnvSteps = finishedAgentSteps = 0;
            return r;
        }

        static bool Flag(IDictionary<string, bool> flags, string key) { bool v; return flags != null && flags.TryGetValue(key, out v) && v; }
        static IEnumerable<string> Keys(IDictionary<string, bool> flags) { return flags == null ? Enumerable.Empty<string>() : flags.Keys; }

        void Join(string id, float[] obs)
        {
            if (string.IsNullOrEmpty(id) || id.Length > 256) throw new UsageException("agent ids are 1 to 256 chars");
            string module = moduleOf(id);
            ModuleSpec spec = specOf(module);
            if (obs == null || obs.Length != spec.ObservationSize)
                throw new UsageException("agent '" + id + "' (module '" + module + "'): " + (obs == null ? 0 : obs.Length) + " floats, but its observations have " + spec.ObservationSize);
            var a = new AgentState { Builder = new EpisodeBuilder(spec.ObservationShape, spec.ActionSpace), Module = module, LastObs = (float[])obs.Clone() };
            a.Builder.Start(obs, true);
            a.Ticks.Add(episode.EnvT);
            episode.Agents[id] = a;
        }

        void Complete(AgentState a, float[] obs, bool terminated, bool truncated)
        {
            a.Builder.Step(a.Action, a.Dist, a.Reward, obs, terminated, truncated, false);
            a.Ticks.Add(episode.EnvT);
            a.LastObs = (float[])obs.Clone();
            a.Action = null;
            a.Acting = false;
            a.Reward = 0;
            episode.StepsSinceCut++;
            a.Done = terminated || truncated;
        }

        void Leave(AgentState a, bool terminated, bool truncated)
        {
            if (a.Acting) Complete(a, a.LastObs, terminated, truncated);  // no final observation came: the step ends on the last one seen
            else a.Builder.End(false, true);
            a.Done = true;
        }

        void End(bool terminated, bool truncated)
        {
            foreach (AgentState a in episode.Agents.Values) if (!a.Done) Leave(a, terminated, truncated || !terminated);
            if (episode.StepsSinceCut > 0) Emit(terminated, truncated);
            episode = null;
        }

        void Emit(bool terminated, bool truncated)
        {
            var agents = new List<object>();
            var ticks = new MsgMap();
            var mapping = new MsgMap();
            foreach (var e in episode.Agents)
            {
                List<MsgMap> states = e.Value.Builder.TakeChunks();
                if (states.Count == 0) continue;
                MsgMap state = states[0];  // one chunk per agent per multi-agent chunk: an agent never restarts
                long steps = EpisodeBuilder.Steps(state);
                state.Set("agent_id", e.Key).Set("module_id", e.Value.Module).Set("multi_agent_episode_id", episode.Id);
                agents.Add(new List<object> { e.Key, state });
                List<long> t = e.Value.Ticks;
                ticks.Set(e.Key, NdArray.Of(t.Skip(t.Count - (int)steps - 1).ToArray(), steps + 1));
                e.Value.Ticks = new List<long> { t[t.Count - 1] };
                mapping.Set(e.Key, e.Value.Module);
            }
            finished.Add(new MsgMap()
                .Set("id_", episode.Id).Set("env_t_started", episode.EnvTStarted).Set("env_t", episode.EnvT)
                .Set("is_terminated", terminated).Set("is_truncated", truncated)
                .Set("agent_episodes", agents).Set("agent_env_t", ticks).Set("_agent_to_module_mapping", mapping)
                .Set("_start_time", null).Set("_last_step_time", null).Set("custom_data", new MsgMap()));
            finishedEnvSteps += episode.EnvT - episode.EnvTStarted;
            finishedAgentSteps += episode.StepsSinceCut;
        }
    }
}
