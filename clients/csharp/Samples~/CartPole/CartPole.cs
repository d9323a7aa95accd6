// A CartPole that trains with RLlib through rlinks: the C# template to copy.
//
//   rlinks learner --config ppo_cartpole            # prints "simulators connect to 127.0.0.1:5555"
//   mono cartpole.exe --address 127.0.0.1:5555      # start 2-4 of these (--envs 4, --served-actions, ...)
//
// Your simulator keeps its loop and calls two things: Act for an action,
// Report with what happened. EnvClient runs RLlib's default MLP here (or,
// with --served-actions, asks the learner for each action), records the
// episodes, sends them and takes the new weights.
using System;
using System.IO;
using System.Linq;
using Rlinks;

/// <summary>gymnasium's CartPole-v1: push a cart left or right to keep its pole up, 500 steps at most.</summary>
sealed class CartPoleEnv
{
    const double Gravity = 9.8, CartMass = 1.0, PoleMass = 0.1, HalfPole = 0.5, Force = 10.0, Tau = 0.02;
    const double ThetaLimit = 12 * 2 * Math.PI / 360, XLimit = 2.4;
    const int MaxSteps = 500;
    readonly Random random;
    double x, xDot, theta, thetaDot;
    int stepsTaken;

    public CartPoleEnv(int seed) { random = new Random(seed); }

    public float[] Reset()
    {
        x = Uniform(); xDot = Uniform(); theta = Uniform(); thetaDot = Uniform();
        stepsTaken = 0;
        return Observation();
    }

    double Uniform() { return random.NextDouble() * 0.1 - 0.05; }
    float[] Observation() { return new[] { (float)x, (float)xDot, (float)theta, (float)thetaDot }; }

    /// <summary>One step: the next observation, and whether the pole fell (terminated) or time ran out (truncated).</summary>
    public float[] Step(long action, out bool terminated, out bool truncated)
    {
        double force = action == 1 ? Force : -Force;
        double cos = Math.Cos(theta), sin = Math.Sin(theta);
        double total = CartMass + PoleMass;
        double temp = (force + PoleMass * HalfPole * thetaDot * thetaDot * sin) / total;
        double thetaAcc = (Gravity * sin - cos * temp) / (HalfPole * (4.0 / 3.0 - PoleMass * cos * cos / total));
        double xAcc = temp - PoleMass * HalfPole * thetaAcc * cos / total;
        x += Tau * xDot; xDot += Tau * xAcc; theta += Tau * thetaDot; thetaDot += Tau * thetaAcc;
        stepsTaken++;
        terminated = Math.Abs(x) > XLimit || Math.Abs(theta) > ThetaLimit;
        truncated = !terminated && stepsTaken >= MaxSteps;
        return Observation();
    }
}

static class Program
{
    static int Main(string[] args)
    {
        string address = "127.0.0.1:5555";
        int envs = 1, seed = 0;
        long maxSteps = long.MaxValue;
        var options = new EnvClientOptions();
        for (int i = 0; i < args.Length; i++)
        {
            switch (args[i])
            {
                case "--address": address = args[++i]; break;
                case "--envs": envs = int.Parse(args[++i]); break;
                case "--seed": seed = int.Parse(args[++i]); break;
                case "--max-steps": maxSteps = long.Parse(args[++i]); break;
                case "--served-actions": options.Inference = Inference.Served; break;
                case "--timeout": options.Connection.Timeout = TimeSpan.FromSeconds(double.Parse(args[++i])); break;
                case "--retry-attempts": options.Connection.RetryAttempts = int.Parse(args[++i]); break;
                case "--connect-wait": options.Connection.ConnectWait = TimeSpan.FromSeconds(double.Parse(args[++i])); break;
                case "--unreliable": options.Connection.Reliable = false; break;
                case "--secret-file": options.Connection.Secret = File.ReadAllText(args[++i]); break;
                case "--ca-file": options.Connection.Tls.CaFile = args[++i]; break;
                default: Console.Error.WriteLine("unknown argument " + args[i]); return 2;
            }
        }
        options.Seed = seed;

        var client = new EnvClient(address, options);
        Console.CancelKeyPress += (sender, e) => { e.Cancel = true; client.Stop(); };
        var sims = Enumerable.Range(0, envs).Select(e => new CartPoleEnv(seed * 1000 + e)).ToArray();
        int[] ids = Enumerable.Range(0, envs).ToArray();
        float[][] obs = sims.Select(sim => sim.Reset()).ToArray();
        long steps = 0;
        int exitCode = 0;
        try
        {
            client.Connect();
            Console.Error.WriteLine("connected to " + client.Address + ": " + envs + " env(s), "
                + (client.IsServed ? "actions served by the learner" : "running the MLP here") + ", "
                + (client.OnPolicy ? "on-policy batches" : "off-policy batches"));
            while (steps < maxSteps)
            {
                EnvAction[] actions = client.ActMany(ids, obs);           // one call for every env (served: one ACT)
                for (int e = 0; e < envs; e++)
                {
                    bool terminated, truncated;
                    float[] next = sims[e].Step(actions[e].Index, out terminated, out truncated);
                    client.Report(e, 1.0f, next, terminated, truncated);
                    obs[e] = terminated || truncated ? sims[e].Reset() : next;   // the next Act starts the next episode
                }
                steps += envs;
            }
            client.Close();                                           // sends what is due and waits for its ACKs
        }
        catch (TrainingEndedException e) { Console.Error.WriteLine("the learner stopped: " + e.Message); }
        catch (ClientClosedException) { Console.Error.WriteLine("stopped"); }
        catch (NotAgreedException e) { Console.Error.WriteLine(e.Message); exitCode = 3; }
        catch (ProtocolException e) { Console.Error.WriteLine("error: protocol error (" + e.Code + "): " + e.Message); exitCode = 1; }
        catch (RlinksException e) { Console.Error.WriteLine("error: " + e.Message); exitCode = 1; }
        finally { client.Connection.Close(); }
        EnvClientStats s = client.Stats;
        Console.WriteLine(string.Format(System.Globalization.CultureInfo.InvariantCulture,
            "summary: steps={0} episodes={1} mean_return_last_100={2:F1} weights_seq_no={3} reconnects={4} batches_resent={5} steps_sent={6} steps_acked={7}",
            s.Steps, s.Episodes, double.IsNaN(s.MeanReturn) ? 0 : s.MeanReturn, s.WeightsSeqNo, s.Connection.Reconnects,
            s.Connection.BatchesResent, s.Connection.StepsSent, s.Connection.StepsAcked));
        return exitCode;
    }
}
