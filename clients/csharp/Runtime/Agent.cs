// An Agent in Unity ML-Agents' shape, over EnvClient: porting an ML-Agents agent is mostly its base class and imports.
//
// ML-Agents                                     here (namespace Rlinks)
//   Agent.CollectObservations(VectorSensor)       the same
//   Agent.OnActionReceived(ActionBuffers)         the same (DiscreteActions[0], ContinuousActions[i])
//   Agent.Heuristic(in ActionBuffers)             the same; used when TakesOver() says so: a take-over (PROTOCOL.md 10.8)
//   AddReward, SetReward, EndEpisode,             the same
//   EpisodeInterrupted, OnEpisodeBegin, MaxStep
//   Academy + DecisionRequester                   AgentDriver.Step() once per decision (RLinksAcademy calls it in FixedUpdate)
//
// Under Unity (UNITY_5_3_OR_NEWER) an Agent is a MonoBehaviour, as in
// ML-Agents; anywhere else (Mono, .NET, Godot's C#) a plain class.
using System;
using System.Collections.Generic;
using System.Linq;

namespace Rlinks
{
    /// <summary>Where CollectObservations puts an agent's observation (ML-Agents' VectorSensor), flat floats.</summary>
    public sealed class VectorSensor
    {
        readonly List<float> values = new List<float>();

        public void AddObservation(float x) { values.Add(x); }
        public void AddObservation(int x) { values.Add(x); }
        public void AddObservation(bool x) { values.Add(x ? 1f : 0f); }
        public void AddObservation(IEnumerable<float> xs) { values.AddRange(xs); }
#if UNITY_5_3_OR_NEWER
        public void AddObservation(UnityEngine.Vector2 v) { values.Add(v.x); values.Add(v.y); }
        public void AddObservation(UnityEngine.Vector3 v) { values.Add(v.x); values.Add(v.y); values.Add(v.z); }
        public void AddObservation(UnityEngine.Quaternion q) { values.Add(q.x); values.Add(q.y); values.Add(q.z); values.Add(q.w); }
#endif
        /// <summary>A one-hot observation of <paramref name="index"/> among <paramref name="size"/>.</summary>
        public void AddOneHotObservation(int index, int size) { for (int i = 0; i < size; i++) values.Add(i == index ? 1f : 0f); }

        internal void Reset() { values.Clear(); }
        internal float[] ToArray() { return values.ToArray(); }
    }

    /// <summary>An agent's actions (ML-Agents' ActionBuffers): one discrete branch, or continuous values.</summary>
    public struct ActionBuffers
    {
        public int[] DiscreteActions;
        public float[] ContinuousActions;

        public ActionBuffers(int[] discrete, float[] continuous) { DiscreteActions = discrete; ContinuousActions = continuous; }
    }

#if UNITY_5_3_OR_NEWER
    public abstract class Agent : UnityEngine.MonoBehaviour
#else
    public abstract class Agent
#endif
    {
        /// <summary>Steps after which an episode ends as truncated (0: never), as ML-Agents' MaxStep.</summary>
        public int MaxStep;
        /// <summary>Act by Heuristic() and record its actions as take-overs (ML-Agents' "Heuristic Only" behaviour type).</summary>
        public bool HeuristicOnly;

        internal int Env = -1;
        internal bool Acted, EndRequested, EndTerminated;
        internal float PendingReward;
        float cumulativeReward;
        int stepCount;

        public int StepCount { get { return stepCount; } }
        public float GetCumulativeReward() { return cumulativeReward; }

        /// <summary>Once, when the agent joins the driver.</summary>
        public virtual void Initialize() { }
        public virtual void OnEpisodeBegin() { }
        public abstract void CollectObservations(VectorSensor sensor);
        public abstract void OnActionReceived(ActionBuffers actions);
        /// <summary>The agent's own decision (a person at the controls, a scripted controller).</summary>
        public virtual void Heuristic(in ActionBuffers actionsOut) { }
        /// <summary>Whether this decision is the heuristic's: a take-over. Default: HeuristicOnly.</summary>
        public virtual bool TakesOver() { return HeuristicOnly; }

        public void AddReward(float increment) { PendingReward += increment; cumulativeReward += increment; }
        public void SetReward(float reward) { cumulativeReward += reward - PendingReward; PendingReward = reward; }
        /// <summary>The episode ended (the task succeeded or failed): terminated.</summary>
        public void EndEpisode() { EndRequested = true; EndTerminated = true; }
        /// <summary>The episode was cut short (not the agent's doing): truncated.</summary>
        public void EpisodeInterrupted() { EndRequested = true; EndTerminated = false; }

        internal void BeginEpisode()
        {
            stepCount = 0;
            cumulativeReward = 0;
            PendingReward = 0;
            EndRequested = false;
            Acted = false;
            OnEpisodeBegin();
        }

        internal void CountStep() { stepCount++; }

#if UNITY_5_3_OR_NEWER
        /// <summary>Joins the scene's RLinksAcademy (override and call base.OnEnable() to add your own).</summary>
        protected virtual void OnEnable() { if (Unity.RLinksAcademy.Instance != null) Unity.RLinksAcademy.Instance.Register(this); }
        protected virtual void OnDisable() { if (Unity.RLinksAcademy.Instance != null) Unity.RLinksAcademy.Instance.Unregister(this); }
#endif
    }

    /// <summary>
    /// Steps many agents with one EnvClient (ML-Agents' Academy): each agent is an env of the client, so agents
    /// join (Add) and leave (Remove) at any time. Step() is one decision for every agent: one ACT when served.
    /// </summary>
    public sealed class AgentDriver : IDisposable
    {
        readonly EnvClient client;
        readonly List<Agent> agents = new List<Agent>();
        readonly VectorSensor sensor = new VectorSensor();
        int nextEnv;

        public AgentDriver(string address, EnvClientOptions options = null) { client = new EnvClient(address, options); }

        public EnvClient Client { get { return client; } }
        public IReadOnlyList<Agent> Agents { get { return agents; } }

        public void Add(Agent agent)
        {
            if (agent.Env >= 0) return;
            agent.Env = nextEnv++;
            agents.Add(agent);
            agent.Initialize();
            agent.BeginEpisode();
        }

        /// <summary>The agent leaves: its episode ends where it stands (truncated).</summary>
        public void Remove(Agent agent)
        {
            if (!agents.Remove(agent)) return;
            if (agent.Acted) client.Report(agent.Env, agent.PendingReward, Observe(agent), false, true);
            else client.EndEpisode(agent.Env);
            agent.Env = -1;
        }

        float[] Observe(Agent agent)
        {
            sensor.Reset();
            agent.CollectObservations(sensor);
            return sensor.ToArray();
        }

        /// <summary>Ends the episodes asked to end (EndEpisode, EpisodeInterrupted, MaxStep) with their final observations, and starts the next.</summary>
        void Finish(Agent agent)
        {
            bool maxed = agent.MaxStep > 0 && agent.StepCount >= agent.MaxStep;
            if (!agent.EndRequested && !maxed) return;
            bool terminated = agent.EndRequested && agent.EndTerminated;
            if (agent.Acted) client.Report(agent.Env, agent.PendingReward, Observe(agent), terminated, !terminated);
            else client.EndEpisode(agent.Env);
            agent.BeginEpisode();
        }

        /// <summary>One decision for every agent: observations in, rewards reported, actions out (OnActionReceived).</summary>
        /// <exception cref="TrainingEndedException">the learner ended the run</exception>
        public void Step()
        {
            if (agents.Count == 0) return;
            foreach (Agent agent in agents.ToList()) Finish(agent);
            var observations = new Dictionary<Agent, float[]>();
            foreach (Agent agent in agents)
            {
                float[] obs = Observe(agent);
                observations[agent] = obs;
                if (agent.Acted) client.Report(agent.Env, agent.PendingReward, obs, false, false);
                agent.PendingReward = 0;
            }
            List<Agent> policy = agents.Where(a => !a.TakesOver()).ToList();
            EnvAction[] chosen = policy.Count == 0 ? new EnvAction[0]
                : client.ActMany(policy.Select(a => a.Env).ToArray(), policy.Select(a => observations[a]).ToArray());
            var actions = new Dictionary<Agent, EnvAction>();
            for (int i = 0; i < policy.Count; i++) actions[policy[i]] = chosen[i];
            foreach (Agent agent in agents.Where(a => a.TakesOver()))
            {
                var buffers = Buffers();
                agent.Heuristic(in buffers);
                EnvAction own = FromBuffers(buffers);
                client.TakeOver(agent.Env, observations[agent], own);
                actions[agent] = own;
            }
            foreach (Agent agent in agents.ToList())
            {
                agent.Acted = true;
                agent.CountStep();
                agent.OnActionReceived(ToBuffers(actions[agent]));
                Finish(agent);
            }
        }

        ActionBuffers Buffers()
        {
            ActionSpace space = client.Config.ActionSpace;
            return space.IsDiscrete ? new ActionBuffers(new int[1], new float[0]) : new ActionBuffers(new int[0], new float[space.Size]);
        }

        EnvAction FromBuffers(ActionBuffers b) { return client.Config.ActionSpace.IsDiscrete ? EnvAction.OfIndex(b.DiscreteActions[0]) : EnvAction.OfBox(b.ContinuousActions); }

        static ActionBuffers ToBuffers(EnvAction a)
        {
            return a.IsDiscrete ? new ActionBuffers(new[] { (int)a.Index }, new float[0]) : new ActionBuffers(new int[0], (float[])a.Box.Clone());
        }

        /// <summary>Delivers what is due, then closes the connection.</summary>
        public void Close() { client.Close(); }
        public void Dispose() { Close(); }
    }
}
