// One env's episode, recorded step by step and cut into chunks (PROTOCOL.md section 7).
//
// Each chunk is the map RLlib's SingleAgentEpisode.get_state() gives, in the
// stacked form (finalized: one array per column): observations [T+1, *obs]
// float32, actions [T] int64 (Discrete) or [T, *shape] float32 (Box),
// rewards [T] float32, and the extra model outputs action_logp [T] and
// action_dist_inputs [T, n] (and rlinks_takeover [T] when a step was taken
// over, PROTOCOL.md 10.8). A running episode cut at a batch boundary goes on
// in the next chunk with the same id_, t_started = the old t, and the old
// chunk's last observation first (RLlib's episode.cut()).
using System;
using System.Collections.Generic;
using System.Diagnostics;

namespace Rlinks
{
    public sealed class EpisodeBuilder
    {
        /// <summary>Env steps per chunk at most (the runner's check allows 65,536): a longer episode is cut.</summary>
        public const int MaxChunkSteps = 65536;
        static readonly Stopwatch Clock = Stopwatch.StartNew();

        readonly long[] obsShape;
        readonly ActionSpace space;
        readonly int distSize;
        readonly List<float[]> observations = new List<float[]>();
        readonly List<long> indices = new List<long>();
        readonly List<float[]> boxes = new List<float[]>();
        readonly List<float> rewards = new List<float>(), logps = new List<float>();
        readonly List<float[]> dists = new List<float[]>();
        readonly List<bool> takenOver = new List<bool>();
        string id = "";
        long tStarted;
        double? startTime, lastStepTime;
        readonly List<MsgMap> finished = new List<MsgMap>();

        /// <summary>An episode is open: reset and not yet ended.</summary>
        public bool Running { get; private set; }
        /// <summary>False: played with the policy, never sent (RLlib's training_enabled=False).</summary>
        public bool Train { get; private set; }
        /// <summary>The episode's return so far, and its steps.</summary>
        public double Return { get; private set; }
        public long Length { get; private set; }
        /// <summary>Steps recorded and not yet handed out in a chunk.</summary>
        public long UnsentSteps
        {
            get
            {
                long n = rewards.Count;
                foreach (MsgMap chunk in finished) n += Steps(chunk);
                return n;
            }
        }
        public float[] LastObservation { get { return observations.Count == 0 ? null : observations[observations.Count - 1]; } }

        public EpisodeBuilder(long[] obsShape, ActionSpace space)
        {
            this.obsShape = obsShape;
            this.space = space;
            distSize = space.DistInputs;
        }

        /// <summary>Starts an episode at <paramref name="obs"/>; one still running is cut off as truncated first.</summary>
        public void Start(float[] obs, bool train)
        {
            if (Running) End(false, true);
            id = Guid.NewGuid().ToString("N");
            tStarted = 0;
            Running = true;
            Train = train;
            Return = 0;
            Length = 0;
            ClearColumns();
            observations.Add((float[])obs.Clone());
            startTime = null;
        }

        /// <summary>Records one step; a terminated or truncated step ends the episode.</summary>
        public void Step(Choice choice, float[] distInputs, float reward, float[] nextObs, bool terminated, bool truncated, bool takeOver)
        {
            if (!Running) throw new UsageException("a step without an episode: act() starts one");
            double now = Clock.Elapsed.TotalSeconds;
            if (startTime == null) startTime = now;
            lastStepTime = now;
            Return += reward;
            Length++;
            if (Train)
            {
                observations.Add((float[])nextObs.Clone());
                if (space.IsDiscrete) indices.Add(choice.Index); else boxes.Add(choice.Recorded);
                rewards.Add(reward);
                logps.Add(choice.Logp);
                dists.Add(distInputs);
                takenOver.Add(takeOver);
            }
            else
            {
                observations[0] = (float[])nextObs.Clone();
            }
            if (terminated || truncated) End(terminated, truncated);
            else if (Train && rewards.Count >= MaxChunkSteps) Cut();
        }

        /// <summary>Ends the episode where it stands.</summary>
        public void End(bool terminated, bool truncated)
        {
            if (!Running) return;
            Running = false;
            if (Train && rewards.Count > 0) finished.Add(Chunk(terminated, truncated));
            ClearColumns();
        }

        /// <summary>Every chunk finished since the last call, and the running episode's steps so far as a chunk that goes on.</summary>
        public List<MsgMap> TakeChunks()
        {
            if (Running && Train && rewards.Count > 0) Cut();
            var r = new List<MsgMap>(finished);
            finished.Clear();
            return r;
        }

        void Cut()
        {
            finished.Add(Chunk(false, false));
            float[] last = LastObservation;
            tStarted += rewards.Count;
            ClearColumns();
            observations.Add(last);
            startTime = null;
        }

        void ClearColumns()
        {
            observations.Clear(); indices.Clear(); boxes.Clear(); rewards.Clear(); logps.Clear(); dists.Clear(); takenOver.Clear();
        }

        static MsgMap Buffer(object data, bool finalized)
        {
            return new MsgMap().Set("data", data).Set("lookback", 0L).Set("finalized", finalized).Set("space", null);
        }

        static float[] Flat(List<float[]> rows, int width)
        {
            var r = new float[rows.Count * width];
            for (int i = 0; i < rows.Count; i++) Array.Copy(rows[i], 0, r, i * width, width);
            return r;
        }

        static long[] Prepend(long first, long[] rest)
        {
            var r = new long[rest.Length + 1];
            r[0] = first;
            Array.Copy(rest, 0, r, 1, rest.Length);
            return r;
        }

        MsgMap Chunk(bool terminated, bool truncated)
        {
            int t = rewards.Count;
            int obsSize = observations[0].Length;
            var infos = new List<object>();
            for (int i = 0; i <= t; i++) infos.Add(new MsgMap());
            NdArray actions = space.IsDiscrete ? NdArray.Of(indices.ToArray(), t) : NdArray.Of(Flat(boxes, space.Size), Prepend(t, space.Shape));
            var extra = new MsgMap()
                .Set("action_logp", Buffer(NdArray.Of(logps.ToArray(), t), true))
                .Set("action_dist_inputs", Buffer(NdArray.Of(Flat(dists, distSize), t, distSize), true));
            if (takenOver.Contains(true)) extra.Set("rlinks_takeover", Buffer(NdArray.Of(takenOver.ToArray()), true));
            return new MsgMap()
                .Set("id_", id).Set("agent_id", null).Set("module_id", null).Set("multi_agent_episode_id", null)
                .Set("observations", Buffer(NdArray.Of(Flat(observations, obsSize), Prepend(t + 1, obsShape)), true))
                .Set("infos", Buffer(infos, false))
                .Set("actions", Buffer(actions, true))
                .Set("rewards", Buffer(NdArray.Of(rewards.ToArray(), t), true))
                .Set("extra_model_outputs", extra)
                .Set("is_terminated", terminated).Set("is_truncated", truncated)
                .Set("t_started", tStarted).Set("t", tStarted + t)
                .Set("_observation_space", null).Set("_action_space", null)
                .Set("_start_time", startTime).Set("_last_step_time", startTime == null ? null : lastStepTime);
        }

        /// <summary>Env steps in a chunk (t - t_started).</summary>
        public static long Steps(MsgMap chunk) { return (long)chunk.Get("t") - (long)chunk.Get("t_started"); }
    }
}
