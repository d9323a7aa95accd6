// The CartPole as an ML-Agents-style Agent: the same calls an ML-Agents agent makes, driven by AgentDriver.
//
//   mono cartpole_agent.exe --address 127.0.0.1:5555 --agents 4 [--teacher]
//
// In Unity the agent is a MonoBehaviour and RLinksAcademy (Runtime/Unity)
// calls driver.Step() in FixedUpdate; here Main does. --teacher lets a
// scripted controller take over whenever the pole leans far (Heuristic).
using System;
using System.Linq;
using Rlinks;

sealed class CartPoleAgent : Agent
{
    readonly CartPoleEnv env;
    float[] state;
    public bool Teacher;

    public CartPoleAgent(int seed) { env = new CartPoleEnv(seed); MaxStep = 500; }

    public override void OnEpisodeBegin() { state = env.Reset(); }

    public override void CollectObservations(VectorSensor sensor) { sensor.AddObservation(state); }

    public override void OnActionReceived(ActionBuffers actions)
    {
        bool terminated, truncated;
        state = env.Step(actions.DiscreteActions[0], out terminated, out truncated);
        AddReward(1f);
        if (terminated) EndEpisode();
    }

    /// <summary>Push the cart the way the pole is falling.</summary>
    public override void Heuristic(in ActionBuffers actionsOut) { actionsOut.DiscreteActions[0] = state[3] > 0 ? 1 : 0; }

    public override bool TakesOver() { return Teacher && Math.Abs(state[2]) > 0.15; }
}

static class AgentProgram
{
    static int Main(string[] args)
    {
        string address = "127.0.0.1:5555";
        int count = 1;
        long maxSteps = long.MaxValue;
        bool teacher = false;
        for (int i = 0; i < args.Length; i++)
        {
            switch (args[i])
            {
                case "--address": address = args[++i]; break;
                case "--agents": count = int.Parse(args[++i]); break;
                case "--max-steps": maxSteps = long.Parse(args[++i]); break;
                case "--teacher": teacher = true; break;
                default: Console.Error.WriteLine("unknown argument " + args[i]); return 2;
            }
        }
        var driver = new AgentDriver(address);
        foreach (int seed in Enumerable.Range(0, count)) driver.Add(new CartPoleAgent(seed) { Teacher = teacher });
        int code = 0;
        try
        {
            for (long steps = 0; steps < maxSteps; steps += count) driver.Step();
            driver.Close();
        }
        catch (TrainingEndedException e) { Console.Error.WriteLine("the learner stopped: " + e.Message); }
        catch (RlinksException e) { Console.Error.WriteLine("error: " + e.GetType().Name + ": " + e.Message); code = 1; }
        finally { driver.Client.Connection.Close(); }
        EnvClientStats s = driver.Client.Stats;
        Console.WriteLine("summary: steps=" + s.Steps + " episodes=" + s.Episodes + " takeover_steps=" + s.TakeoverSteps
            + " steps_sent=" + s.Connection.StepsSent + " steps_acked=" + s.Connection.StepsAcked);
        return code;
    }
}
