// Served actions on the wire (PROTOCOL.md 10.5, 10.5.1, 10.8): the rows of an ACT and the ACTIONS answering it.
using System;
using System.Collections.Generic;

namespace Rlinks
{
    /// <summary>One row of an ACT: an env's observation now and what its last action led to.</summary>
    public sealed class ActRow
    {
        public int Env;
        public float[] Obs;
        public float Reward;
        public bool Start, Terminated, Truncated;
        /// <summary>The simulator's own action (served_taken): a Discrete index, or null.</summary>
        public long? TakenIndex;
        /// <summary>The simulator's own Box action as the env applies it, or null.</summary>
        public float[] TakenBox;
        /// <summary>A person or a script took over (takeover; only with a taken action).</summary>
        public bool TakeOver;
        /// <summary>On start rows: false plays an episode nothing of which is recorded (served_taken).</summary>
        public bool? Train;

        public bool WantsAction { get { return !Terminated && !Truncated; } }
        public bool HasTaken { get { return TakenIndex.HasValue || TakenBox != null; } }

        public ActRow With(bool start) { var r = (ActRow)MemberwiseClone(); r.Start = start; return r; }
    }

    /// <summary>An ACTIONS message, read: one action per row that wanted one, in row order.</summary>
    public sealed class ActionsReply
    {
        public List<int> Env = new List<int>();
        public NdArray Actions;
        public long WeightsSeqNo;
        /// <summary>Envs whose open episode a dropped connection ended (started again by this ACT).</summary>
        public List<int> Interrupted = new List<int>();
    }

    public static class Served
    {
        public const int MaxEnvId = int.MaxValue;
        public const int MaxActRows = 65536;

        /// <summary>The ACT for <paramref name="rows"/>, observations of <paramref name="obsShape"/>.</summary>
        /// <exception cref="UsageException">a row of the wrong size, a non-finite reward, a row that starts and ends</exception>
        public static MsgMap MakeAct(IList<ActRow> rows, long[] obsShape)
        {
            int k = rows.Count;
            if (k < 1 || k > MaxActRows) throw new UsageException("an ACT needs 1 to " + MaxActRows + " rows, got " + k);
            long size = 1;
            foreach (long d in obsShape) size *= d;
            var obs = new float[k * size];
            var reward = new float[k];
            bool[] start = new bool[k], terminated = new bool[k], truncated = new bool[k];
            var env = new List<object>();
            bool anyTaken = false, anyTrain = false, anyTakeOver = false;
            for (int i = 0; i < k; i++)
            {
                ActRow row = rows[i];
                if (row.Env < 0) throw new UsageException("ACT row " + i + ": env " + row.Env + " is not an int in 0.." + MaxEnvId);
                if (row.Obs == null || row.Obs.Length != size) throw new UsageException("ACT row " + i + ": an observation needs " + size + " numbers, got " + (row.Obs == null ? 0 : row.Obs.Length));
                if (float.IsNaN(row.Reward) || float.IsInfinity(row.Reward)) throw new UsageException("ACT row " + i + ": the reward " + row.Reward + " is not finite");
                if (row.Start && !row.WantsAction) throw new UsageException("ACT row " + i + ": a row can't both start and end an episode");
                if (row.HasTaken && !row.WantsAction) throw new UsageException("ACT row " + i + ": a taken action on a row that ends its episode");
                Array.Copy(row.Obs, 0, obs, i * size, size);
                reward[i] = row.Reward;
                start[i] = row.Start; terminated[i] = row.Terminated; truncated[i] = row.Truncated;
                env.Add((long)row.Env);
                anyTaken |= row.HasTaken;
                anyTrain |= row.Train.HasValue;
                anyTakeOver |= row.TakeOver;
            }
            var shape = new long[obsShape.Length + 1];
            shape[0] = k;
            Array.Copy(obsShape, 0, shape, 1, obsShape.Length);
            MsgMap act = Messages.Make(MessageType.Act, "env", env, "obs", NdArray.Of(obs, shape), "reward", NdArray.Of(reward, k),
                "start", NdArray.Of(start), "terminated", NdArray.Of(terminated), "truncated", NdArray.Of(truncated));
            if (anyTaken)
            {
                var mask = new bool[k];
                for (int i = 0; i < k; i++) mask[i] = rows[i].HasTaken;
                act.Set("taken_mask", NdArray.Of(mask)).Set("taken", TakenColumn(rows));
            }
            if (anyTrain)
            {
                var train = new bool[k];
                for (int i = 0; i < k; i++) train[i] = rows[i].Train != false;
                act.Set("train", NdArray.Of(train));
            }
            if (anyTakeOver)
            {
                var marks = new bool[k];
                for (int i = 0; i < k; i++) marks[i] = rows[i].TakeOver && rows[i].HasTaken;
                act.Set("takeover", NdArray.Of(marks));
            }
            return act;
        }

        static NdArray TakenColumn(IList<ActRow> rows)
        {
            int width = -1;
            foreach (var row in rows) if (row.TakenBox != null) width = row.TakenBox.Length;
            if (width < 0)
            {
                var taken = new long[rows.Count];
                for (int i = 0; i < rows.Count; i++) taken[i] = rows[i].TakenIndex ?? 0;
                return NdArray.Of(taken, rows.Count);
            }
            var box = new float[rows.Count * width];
            for (int i = 0; i < rows.Count; i++)
            {
                if (rows[i].TakenIndex.HasValue || (rows[i].TakenBox != null && rows[i].TakenBox.Length != width))
                    throw new UsageException("taken actions in one ACT must all be indices (Discrete) or all arrays of one length (Box)");
                if (rows[i].TakenBox != null) Array.Copy(rows[i].TakenBox, 0, box, i * width, width);
            }
            return NdArray.Of(box, rows.Count, width);
        }

        /// <summary>An ACTIONS message for the envs that wanted actions, checked.</summary>
        /// <exception cref="InvalidMessageException">for other envs, of another count, not numbers</exception>
        public static ActionsReply ReadActions(MsgMap message, IList<int> expected)
        {
            var reply = new ActionsReply { WeightsSeqNo = (long)message.Get("weights_seq_no") };
            foreach (object id in (List<object>)message.Get("env"))
            {
                if (!(id is long) || (long)id < 0 || (long)id > MaxEnvId) throw new InvalidMessageException("ACTIONS: env ids must be ints in 0.." + MaxEnvId);
                reply.Env.Add((int)(long)id);
            }
            bool same = reply.Env.Count == expected.Count;
            for (int i = 0; same && i < expected.Count; i++) same = reply.Env[i] == expected[i];
            if (!same) throw new InvalidMessageException("ACTIONS: for envs [" + string.Join(", ", reply.Env) + "], but actions were asked for [" + string.Join(", ", expected) + "]");
            object actions = message.Get("actions");
            var list = actions as List<object>;
            if (list != null)
            {
                var values = new float[list.Count];
                for (int i = 0; i < list.Count; i++)
                {
                    if (list[i] is long) values[i] = (long)list[i];
                    else if (list[i] is double) values[i] = (float)(double)list[i];
                    else throw new InvalidMessageException("ACTIONS: a list of actions must hold numbers");
                }
                actions = NdArray.Of(values, list.Count);
            }
            var array = (NdArray)actions;
            if (!array.Dtype.IsNumeric) throw new InvalidMessageException("ACTIONS: actions of dtype " + array.Dtype.Str);
            long m = array.Shape.Length > 0 ? array.Shape[0] : -1;
            if (m != reply.Env.Count) throw new InvalidMessageException("ACTIONS: " + m + " actions for " + reply.Env.Count + " envs");
            reply.Actions = array;
            return reply;
        }
    }
}
