// The door a simulator uses: Act for an action, Report what happened (the Python EnvClient's calls).
//
// Local inference runs RLlib's default MLP here (Mlp), records the episodes
// and sends them: on-policy, once this client's share of the next update
// (want_steps) is recorded, the Report that completed it sends it and waits
// for the weights trained on it; off-policy, every rollout fragment goes as
// EPISODES and fresh weights are fetched after it. Served inference asks the
// runner for every action (one ACT for all envs of a call) and the runner
// records the episodes. Envs are named by ints and may come and go: an
// env's first Act starts its episode, a terminated or truncated Report ends
// it; many agents sharing one policy are many envs. Not thread-safe, but for
// Stop() and Stats: one thread runs the loop.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Rlinks
{
    public enum Inference { Automatic, Local, Served }

    public sealed class EnvClientOptions
    {
        public ClientOptions Connection = new ClientOptions();
        /// <summary>Automatic: run the policy here when it is RLlib's default MLP, else ask the runner.</summary>
        public Inference Inference = Inference.Automatic;
        /// <summary>Sample actions (true) or take the most likely one (false: logp 0).</summary>
        public bool Explore = true;
        public int? Seed;
        /// <summary>Box actions: RLlib's normalize_actions (the sample unsquashed from [-1, 1] to the bounds) and clip_actions.</summary>
        public bool NormalizeActions = true, ClipActions = false;
        /// <summary>Off-policy runners: fetch weights after every this many batches.</summary>
        public int WeightsEveryBatches = 1;
    }

    /// <summary>What the client did, for a summary line.</summary>
    public sealed class EnvClientStats
    {
        public long Steps, Episodes, WeightsSeqNo, TakeoverSteps;
        public double MeanReturn;
        public ClientStats Connection;
    }

    public sealed class EnvClient : IDisposable
    {
        const int ReturnsKept = 100;

        readonly Client client;
        readonly EnvClientOptions options;
        readonly Random random;
        RunnerConfig config;
        Mlp policy;
        // multi_agent: a policy per module, the episode builder, who acts with which module, actions awaiting their report.
        Dictionary<string, Mlp> modulePolicies;
        MultiAgentEpisodeBuilder multi;
        readonly Dictionary<string, string> modulesAsked = new Dictionary<string, string>();
        bool multiActed;
        double multiReturn;
        long weightsSeqNo;
        long wantSteps;
        int batchesSinceWeights;
        bool served, connected;
        readonly Dictionary<int, EpisodeBuilder> episodes = new Dictionary<int, EpisodeBuilder>();
        // Local: the choice an env acted with, waiting for its Report.
        readonly Dictionary<int, KeyValuePair<Choice, float[]>> acted = new Dictionary<int, KeyValuePair<Choice, float[]>>();
        readonly Dictionary<int, bool> takeOverPending = new Dictionary<int, bool>();
        // Served: rows waiting for the next ACT (ending rows), and per open env its last reward and observation.
        readonly List<ActRow> endingRows = new List<ActRow>();
        readonly Dictionary<int, ActRow> servedNext = new Dictionary<int, ActRow>();
        readonly Dictionary<int, bool> servedTrain = new Dictionary<int, bool>();
        readonly Dictionary<int, double> servedReturn = new Dictionary<int, double>();
        readonly Queue<double> returns = new Queue<double>();
        long steps, episodesDone, takeoverSteps;

        /// <param name="address">the learner's directory, or one runner: host:port or tls://host:port</param>
        public EnvClient(string address, EnvClientOptions options = null)
        {
            this.options = options ?? new EnvClientOptions();
            var extensions = this.options.Connection.Extensions;
            foreach (string name in new[] { Extension.ServedActions, Extension.ServedTaken, Extension.Takeover, Extension.MultiAgent })
                if (!extensions.Contains(name)) extensions.Add(name);
            client = new Client(address, this.options.Connection);
            random = this.options.Seed.HasValue ? new Random(this.options.Seed.Value) : new Random();
        }

        public RunnerConfig Config { get { Connect(); return config; } }
        public bool IsServed { get { Connect(); return served; } }
        public bool OnPolicy { get { Connect(); return config.OnPolicy; } }
        public Address Address { get { return client.Address; } }
        public Client Connection { get { return client; } }

        public EnvClientStats Stats
        {
            get
            {
                return new EnvClientStats
                {
                    Steps = steps, Episodes = episodesDone, WeightsSeqNo = weightsSeqNo, TakeoverSteps = takeoverSteps,
                    MeanReturn = returns.Count == 0 ? double.NaN : returns.Average(), Connection = client.Stats,
                };
            }
        }

        /// <summary>Connects, reads the runner's config and weights, and picks the mode (any call does it when needed).</summary>
        /// <exception cref="NotAgreedException">Inference.Served and a runner that does not serve actions</exception>
        /// <exception cref="UnsupportedModelException">Inference.Local and a module this client can't run</exception>
        public void Connect()
        {
            if (connected) return;
            config = RunnerConfig.Read(client.GetConfig());
            if (config == null)
                throw new UsageException(client.Address + " describes itself only as RLlib's pickle (RLlib's own server); this client needs rlinks' runner");
            served = options.Inference == Inference.Served;
            // A pacing runner takes about this many batches of each client per sample(): more in flight would be sampled with older weights.
            if (!config.OnPolicy && config.PacedInFlight > 0 && config.PacedInFlight < client.Options.MaxUnacked)
                client.Options.MaxUnacked = (int)config.PacedInFlight;
            if (config.MultiAgent != null && client.Agreed(Extension.MultiAgent))
            {
                // Served actions are single-agent only (PROTOCOL.md 10.6): every module runs here.
                if (served) throw new NotAgreedException(client.Address + " serves several modules: served actions are single-agent only; run the policies here");
                multi = new MultiAgentEpisodeBuilder(ModuleOf, m => config.MultiAgent.Modules[m], config.MultiAgent.CountStepsBy);
                Apply(client.GetState());
                wantSteps = config.RolloutFragmentLength;
                connected = true;
                return;
            }
            if (!served)
            {
                WeightsUpdate update = client.GetState();
                try { Apply(update); }
                catch (UnsupportedModelException)
                {
                    if (options.Inference == Inference.Local) throw;
                    served = true;
                }
            }
            if (served) client.RequireServed(false, false);
            wantSteps = config.RolloutFragmentLength;
            connected = true;
        }

        void Apply(WeightsUpdate update)
        {
            if (update.Modules != null)
            {
                long seqNo = update.Modules.Values.Select(w => w.SeqNo).DefaultIfEmpty(0).Max();
                if (seqNo != 0 && seqNo < weightsSeqNo) return;
                var policies = new Dictionary<string, Mlp>();
                foreach (var e in config.MultiAgent.Modules)
                {
                    WeightSet w;
                    if (!update.Modules.TryGetValue(e.Key, out w)) throw new InvalidMessageException("SET_STATE: no weights for module '" + e.Key + "'");
                    policies[e.Key] = new Mlp(w.Params, config.FcnetActivation, config.HeadFcnetActivation, e.Value.ActionSpace);
                }
                modulePolicies = policies;
                weightsSeqNo = seqNo;
                if (update.WantSteps.HasValue) wantSteps = update.WantSteps.Value;
                return;
            }
            if (update.Weights.SeqNo != 0 && update.Weights.SeqNo < weightsSeqNo) return;  // older than what we hold (PROTOCOL.md 8)
            policy = new Mlp(update.Weights.Params, config.FcnetActivation, config.HeadFcnetActivation, config.ActionSpace);
            if (policy.ObservationSize != config.ObservationSize)
                throw new UnsupportedModelException("the module takes " + policy.ObservationSize + " observation values, the space has " + config.ObservationSize);
            weightsSeqNo = update.Weights.SeqNo;
            if (update.WantSteps.HasValue) wantSteps = update.WantSteps.Value;
        }

        // ------------------------------------------------------------------
        // The calls

        /// <summary>The action for <paramref name="obs"/> in env <paramref name="env"/>; an env's first Act (and its first after an episode ended) starts an episode.</summary>
        public EnvAction Act(int env, float[] obs) { return ActMany(new[] { env }, new[] { obs })[0]; }

        /// <summary>Actions for several envs at once (served: one ACT for all of them).</summary>
        public EnvAction[] ActMany(int[] envs, float[][] obs) { return Decide(envs, obs, null, false); }

        /// <summary>Like Act, but the simulator (a person, a script) chose <paramref name="action"/>: recorded with the policy's log-probability of it.</summary>
        public void LogAction(int env, float[] obs, EnvAction action) { Decide(new[] { env }, new[] { obs }, new[] { action }, false); }

        /// <summary>Like LogAction, but marked as a take-over (PROTOCOL.md 10.8): off-policy learners train on it, on-policy ones never do.</summary>
        /// <exception cref="NotAgreedException">a runner that does not speak takeover (RLlib's own server): use LogAction there</exception>
        public void TakeOver(int env, float[] obs, EnvAction action) { Decide(new[] { env }, new[] { obs }, new[] { action }, true); }

        /// <summary>Starts an episode explicitly (a running one ends as truncated); train false: played, never trained on.</summary>
        public void StartEpisode(int env, float[] obs, bool train = true)
        {
            Connect();
            CheckObservation(env, obs);
            if (served)
            {
                if (!train) client.RequireServed(true, false);
                if (servedNext.ContainsKey(env)) EndServed(env, obs, 0f, false, true);
                servedTrain[env] = train;
                return;
            }
            if (acted.ContainsKey(env)) throw new UsageException("env " + env + " acted and its outcome was not reported: call Report() before StartEpisode()");
            Builder(env).Start(obs, train);
        }

        /// <summary>Cuts env's running episode where it stands (truncated).</summary>
        public void EndEpisode(int env)
        {
            Connect();
            if (served)
            {
                ActRow next;
                if (servedNext.TryGetValue(env, out next)) EndServed(env, next.Obs, next.Reward, false, true);
                return;
            }
            acted.Remove(env);
            EpisodeBuilder b;
            if (episodes.TryGetValue(env, out b) && b.Running) { b.End(false, true); Finished(b.Return); }
        }

        /// <summary>The outcome of env's last action; terminated or truncated ends the episode.</summary>
        public void Report(int env, float reward, float[] nextObs, bool terminated, bool truncated)
        {
            Connect();
            RequireSingle();
            CheckObservation(env, nextObs);
            if (float.IsNaN(reward) || float.IsInfinity(reward)) throw new UsageException("env " + env + ": the reward " + reward + " is not finite");
            if (served)
            {
                ActRow next;
                if (!servedNext.TryGetValue(env, out next) || next.Obs != null)
                    throw new UsageException("env " + env + " reported without an action: call Act() first");
                steps++;
                servedReturn[env] = (servedReturn.ContainsKey(env) ? servedReturn[env] : 0) + reward;
                if (terminated || truncated) EndServed(env, nextObs, reward, terminated, truncated);
                else { next.Obs = (float[])nextObs.Clone(); next.Reward = reward; }
                return;
            }
            KeyValuePair<Choice, float[]> pending;
            if (!acted.TryGetValue(env, out pending)) throw new UsageException("env " + env + " reported without an action: call Act() first");
            acted.Remove(env);
            bool mark = takeOverPending.ContainsKey(env);
            takeOverPending.Remove(env);
            EpisodeBuilder b = episodes[env];
            b.Step(pending.Key, pending.Value, reward, nextObs, terminated, truncated, mark);
            steps++;
            if (mark) takeoverSteps++;
            if (terminated || truncated) Finished(b.Return);
            SendWhenDue();
        }

        // ------------------------------------------------------------------
        // Many agents, several policies (a multi-agent runner: PROTOCOL.md 7.6, 10.6)

        /// <summary>Whether the runner serves several modules: use ActAgents and ReportAgents.</summary>
        public bool IsMultiAgent { get { Connect(); return multi != null; } }

        /// <summary>
        /// Actions for the agents due to act: those whose observations the env gave at the last report (or,
        /// starting an episode, every agent in <paramref name="obs"/>). Agents that left at the last report
        /// (with their final observation) get none.
        /// </summary>
        /// <exception cref="UsageException">a single-agent runner, a call out of order, an agent no module serves</exception>
        public Dictionary<string, EnvAction> ActAgents(IDictionary<string, float[]> obs)
        {
            RequireMulti();
            if (multiActed) throw new UsageException("the agents acted and their outcome was not reported: call ReportAgents() before ActAgents() again");
            if (!multi.Running)
            {
                AskModules(obs.Keys);
                multi.Reset(obs);
                multiReturn = 0;
            }
            var choices = new Dictionary<string, KeyValuePair<Choice, float[]>>();
            var actions = new Dictionary<string, EnvAction>();
            foreach (var due in multi.ObservationsToAct())
            {
                float[] given;
                if (!obs.TryGetValue(due.Key, out given) || !given.SequenceEqual(due.Value))
                    throw new UsageException("agent '" + due.Key + "' is due to act on the observation the last report gave it: pass that one");
                string module = multi.ModuleOfAgent(due.Key);
                ActionSpace space = config.MultiAgent.Modules[module].ActionSpace;
                float[] dist = modulePolicies[module].Forward(given);
                Choice choice = space.IsDiscrete ? Sampling.Categorical(dist, random, options.Explore)
                    : Sampling.Gaussian(dist, space, random, options.Explore, options.NormalizeActions, options.ClipActions);
                choices[due.Key] = new KeyValuePair<Choice, float[]>(choice, dist);
                actions[due.Key] = choice.Applied;
            }
            multi.Acted(choices);
            multiActed = true;
            return actions;
        }

        /// <summary>What the env gave after the actions: dicts by agent id; "__all__" in a done dict ends the episode.</summary>
        public void ReportAgents(IDictionary<string, float> rewards, IDictionary<string, float[]> nextObs,
                                 IDictionary<string, bool> terminateds = null, IDictionary<string, bool> truncateds = null)
        {
            RequireMulti();
            if (!multiActed) throw new UsageException("a report without actions: call ActAgents() first");
            AskModules(nextObs.Keys);
            multi.Step(rewards, nextObs, terminateds, truncateds);
            multiActed = false;
            steps++;
            multiReturn += rewards.Values.Sum();
            if (!multi.Running) Finished(multiReturn);
            if (multi.NumSteps >= (config.OnPolicy ? wantSteps : config.RolloutFragmentLength)) SendBatch();
        }

        void RequireSingle()
        {
            if (multi != null) throw new UsageException(client.Address + " serves several modules (multi_agent): use ActAgents and ReportAgents");
        }

        void RequireMulti()
        {
            Connect();
            if (multi == null) throw new UsageException(client.Address + " serves one module (no multi_agent): use Act and Report");
        }

        string ModuleOf(string agentId)
        {
            string module;
            if (config.MultiAgent.Mapping != null) module = config.MultiAgent.Mapping.Find(agentId);
            else modulesAsked.TryGetValue(agentId, out module);
            if (module == null || !config.MultiAgent.Modules.ContainsKey(module))
                throw new UsageException("agent '" + agentId + "': no module of the runner acts for it (its agent_mapping has no row for it)");
            return module;
        }

        /// <summary>Without a mapping table, the runner is asked once per agent before it first acts.</summary>
        void AskModules(IEnumerable<string> agents)
        {
            if (config.MultiAgent.Mapping != null) return;
            var unknown = agents.Where(a => !modulesAsked.ContainsKey(a)).ToList();
            if (unknown.Count == 0) return;
            foreach (var e in client.GetModules(unknown)) modulesAsked[e.Key] = e.Value;
        }

        /// <summary>Delivers what is due and waits for its confirmations (bounded by the timeout), then closes.</summary>
        public void Close()
        {
            try
            {
                if (connected && !client.Stopped)
                {
                    if (served && endingRows.Count > 0) client.Act(endingRows.ToList(), config.ObservationShape);
                    else if (!served && !config.OnPolicy) SendBatch();
                    client.Flush();
                }
            }
            finally { client.Close(); }
        }

        /// <summary>Any thread: the next call, or one waiting now, throws ClientClosedException.</summary>
        public void Stop() { client.Stop(); }

        public void Dispose() { Close(); }

        // ------------------------------------------------------------------
        // Inside

        EpisodeBuilder Builder(int env)
        {
            EpisodeBuilder b;
            if (!episodes.TryGetValue(env, out b)) episodes[env] = b = new EpisodeBuilder(config.ObservationShape, config.ActionSpace);
            return b;
        }

        void CheckObservation(int env, float[] obs)
        {
            if (obs == null || obs.Length != config.ObservationSize)
                throw new UsageException("env " + env + ": " + (obs == null ? 0 : obs.Length) + " floats, but the runner's observations have " + config.ObservationSize);
        }

        void Finished(double episodeReturn)
        {
            episodesDone++;
            returns.Enqueue(episodeReturn);
            while (returns.Count > ReturnsKept) returns.Dequeue();
        }

        EnvAction[] Decide(int[] envs, float[][] obs, EnvAction[] own, bool takeOver)
        {
            Connect();
            RequireSingle();
            if (envs.Length != obs.Length) throw new UsageException("Act: " + envs.Length + " envs and " + obs.Length + " observations");
            for (int i = 0; i < envs.Length; i++) CheckObservation(envs[i], obs[i]);
            if (takeOver && !client.Agreed(Extension.Takeover))
                throw new NotAgreedException(client.Address + " did not agree to takeover: it would train on-policy on steps the policy did not choose; use LogAction there");
            return served ? DecideServed(envs, obs, own, takeOver) : DecideLocal(envs, obs, own, takeOver);
        }

        EnvAction[] DecideLocal(int[] envs, float[][] obs, EnvAction[] own, bool takeOver)
        {
            var result = new EnvAction[envs.Length];
            for (int i = 0; i < envs.Length; i++)
            {
                int env = envs[i];
                if (acted.ContainsKey(env))
                    throw new UsageException("env " + env + " acted and its outcome was not reported: call Report() before Act() again");
                EpisodeBuilder b = Builder(env);
                if (!b.Running) b.Start(obs[i], true);
                else if (!b.LastObservation.SequenceEqual(obs[i]))
                    throw new UsageException("env " + env + ": Act() was given another observation than its last Report() gave (call StartEpisode() for a new episode)");
                float[] dist = policy.Forward(obs[i]);
                Choice choice = own != null ? Sampling.Logged(dist, config.ActionSpace, own[i], options.NormalizeActions)
                    : config.ActionSpace.IsDiscrete ? Sampling.Categorical(dist, random, options.Explore)
                    : Sampling.Gaussian(dist, config.ActionSpace, random, options.Explore, options.NormalizeActions, options.ClipActions);
                acted[env] = new KeyValuePair<Choice, float[]>(choice, dist);
                if (takeOver) takeOverPending[env] = true;
                result[i] = choice.Applied;
            }
            return result;
        }

        /// <summary>On-policy: the share of the update, once recorded, goes and the weights trained on it come back. Off-policy: every fragment goes.</summary>
        void SendWhenDue()
        {
            long recorded = episodes.Values.Sum(b => b.UnsentSteps);
            if (recorded < (config.OnPolicy ? wantSteps : config.RolloutFragmentLength)) return;
            if (acted.Count > 0 && config.OnPolicy) return;  // envs mid-step: their steps finish this share first
            SendBatch();
        }

        void SendBatch()
        {
            var chunks = new List<object>();
            long total = 0;
            if (multi != null)
            {
                total = multi.NumSteps;
                chunks.AddRange(multi.TakeChunks());
            }
            foreach (EpisodeBuilder b in episodes.Values)
                foreach (MsgMap chunk in b.TakeChunks()) { chunks.Add(chunk); total += EpisodeBuilder.Steps(chunk); }
            if (config.OnPolicy)
            {
                Apply(client.SendEpisodesAndGetState(chunks, total));
                return;
            }
            if (chunks.Count > 0) client.SendEpisodes(chunks, total);
            if (++batchesSinceWeights >= options.WeightsEveryBatches)
            {
                batchesSinceWeights = 0;
                Apply(client.GetState());
            }
        }

        EnvAction[] DecideServed(int[] envs, float[][] obs, EnvAction[] own, bool takeOver)
        {
            if (own != null)
            {
                foreach (EnvAction action in own) Sampling.Check(action, config.ActionSpace);
                client.RequireServed(true, takeOver);
            }
            var rows = new List<ActRow>(endingRows);
            for (int i = 0; i < envs.Length; i++)
            {
                int env = envs[i];
                ActRow next;
                bool open = servedNext.TryGetValue(env, out next);
                if (open && next.Obs == null) throw new UsageException("env " + env + " acted and its outcome was not reported: call Report() before Act() again");
                var row = new ActRow { Env = env, Obs = (float[])obs[i].Clone() };
                if (!open)
                {
                    row.Start = true;
                    bool train;
                    if (servedTrain.TryGetValue(env, out train) && !train) row.Train = false;
                    servedReturn[env] = 0;
                }
                else
                {
                    if (!next.Obs.SequenceEqual(obs[i]))
                        throw new UsageException("env " + env + ": Act() was given another observation than its last Report() gave (call StartEpisode() for a new episode)");
                    row.Reward = next.Reward;
                    if (next.Train.HasValue) row.Train = next.Train;
                }
                if (own != null)
                {
                    if (config.ActionSpace.IsDiscrete) row.TakenIndex = own[i].Index; else row.TakenBox = own[i].Box;
                    row.TakeOver = takeOver;
                    if (takeOver) takeoverSteps++;
                }
                if (servedTrain.ContainsKey(env) && !servedTrain[env]) row.Train = false;
                rows.Add(row);
            }
            ActionsReply reply = client.Act(rows, config.ObservationShape);
            endingRows.Clear();
            weightsSeqNo = reply.WeightsSeqNo;
            var result = new EnvAction[envs.Length];
            int at = 0;
            for (int i = 0; i < envs.Length; i++)
            {
                int env = envs[i];
                bool train = !servedTrain.ContainsKey(env) || servedTrain[env];
                servedNext[env] = new ActRow { Env = env, Train = train ? (bool?)null : false };
                result[i] = own != null ? own[i] : ActionAt(reply.Actions, at);
                at++;
            }
            return result;
        }

        EnvAction ActionAt(NdArray actions, int row)
        {
            if (config.ActionSpace.IsDiscrete) return EnvAction.OfIndex(actions.GetLong(row));
            int size = config.ActionSpace.Size;
            var box = new float[size];
            for (int i = 0; i < size; i++) box[i] = (float)actions.GetDouble((long)row * size + i);
            return EnvAction.OfBox(box);
        }

        void EndServed(int env, float[] obs, float reward, bool terminated, bool truncated)
        {
            ActRow next = servedNext[env];
            servedNext.Remove(env);
            endingRows.Add(new ActRow { Env = env, Obs = (float[])obs.Clone(), Reward = reward, Terminated = terminated, Truncated = truncated || !terminated, Train = next.Train });
            servedTrain.Remove(env);
            Finished(servedReturn.ContainsKey(env) ? servedReturn[env] : 0);
            servedReturn.Remove(env);
        }
    }
}
