// Short EnvClient scripts for tests/test_csharp_client.py: mono scenarios.exe ADDRESS NAME [served]
//
//   taken    the simulator's own actions (LogAction), a take-over and an episode not trained on, on envs 0 and 1
//   misuse   calls out of order or of the wrong size: each refused, saying what to do ("error: ..." lines)
//   multi    many agents, two modules, against a multi-agent runner: turn-based agents, one that joins, one
//            that leaves, five ticks an episode (truncated by "__all__"), until one batch has gone
using System;
using System.Collections.Generic;
using System.Linq;
using Rlinks;

static class Scenarios
{
    static readonly float[] A = { 0.01f, 0.02f, 0.03f, 0.04f }, B = { 0.1f, 0.2f, 0.3f, 0.4f }, C = { -0.1f, 0f, 0.1f, 0f }, D = { 0f, 0f, 0f, 0.05f };

    static int Main(string[] args)
    {
        var options = new EnvClientOptions { Seed = 1, Inference = args.Length > 2 && args[2] == "served" ? Inference.Served : Inference.Local };
        var client = new EnvClient(args[0], options);
        try
        {
            if (args[1] == "taken") Taken(client);
            else if (args[1] == "multi") Multi(client);
            else Misuse(client);
            client.Close();
            Console.WriteLine("done");
            return 0;
        }
        catch (NotAgreedException e) { Console.WriteLine("not agreed: " + e.Message); return 3; }
        finally { client.Connection.Close(); }
    }

    static void Refused(System.Action call)
    {
        try { call(); Console.WriteLine("not refused"); }
        catch (UsageException e) { Console.WriteLine("error: " + e.Message); }
    }

    static void Taken(EnvClient client)
    {
        client.StartEpisode(1, A, false);                 // env 1: played, never trained on
        client.Act(1, A);
        client.Report(1, 0.5f, B, false, false);
        client.LogAction(0, A, EnvAction.OfIndex(1));     // env 0: the simulator's own action, then a take-over, then the policy's
        client.Report(0, 0.5f, B, false, false);
        client.Act(1, B);
        client.Report(1, 0.5f, C, true, false);
        client.TakeOver(0, B, EnvAction.OfIndex(0));
        client.Report(0, 0.5f, C, false, false);
        Refused(() => client.LogAction(0, C, EnvAction.OfIndex(2)));
        Refused(() => client.LogAction(0, C, EnvAction.OfBox(new[] { 0.5f })));
        client.Act(0, C);
        client.Report(0, 0.5f, D, true, false);
        EnvClientStats s = client.Stats;
        Console.WriteLine("episodes=" + s.Episodes + " takeover_steps=" + s.TakeoverSteps);
        if (!client.IsServed)
        {
            // The rest of the update's share, so that the batch goes.
            float[] obs = A;
            for (int i = 0; i < 200 && client.Connection.Stats.BatchesSent == 0; i++)
            {
                client.Act(0, obs);
                client.Report(0, 1f, B, false, false);
                obs = B;
            }
        }
    }

    static float[] Obs(string agent, float value) { return Enumerable.Repeat(value, agent.StartsWith("mover") ? 2 : 3).ToArray(); }

    static Dictionary<string, float[]> Observed(float value, params string[] agents) { return agents.ToDictionary(a => a, a => Obs(a, value)); }

    static void Multi(EnvClient client)
    {
        Console.WriteLine("multi-agent: " + client.IsMultiAgent);
        int episodes = 0;
        while (client.Connection.Stats.BatchesSent == 0 && episodes < 40)
        {
            episodes++;
            var none = new Dictionary<string, bool>();
            client.ActAgents(Observed(0.1f, "mover_0", "turn_a"));
            client.ReportAgents(new Dictionary<string, float> { { "mover_0", 1f }, { "turn_a", 0.5f } }, Observed(0.2f, "mover_0", "turn_b"), none, none);
            client.ActAgents(Observed(0.2f, "mover_0", "turn_b"));    // turn_a waits for its turn; turn_b joined
            client.ReportAgents(new Dictionary<string, float> { { "mover_0", 1f }, { "turn_a", 0.25f }, { "turn_b", 1f } },
                                Observed(0.3f, "mover_0", "turn_a", "mover_1"), none, none);
            client.ActAgents(Observed(0.3f, "mover_0", "turn_a", "mover_1"));
            client.ReportAgents(new Dictionary<string, float> { { "mover_0", 1f }, { "mover_1", 2f } }, Observed(0.4f, "mover_0", "mover_1", "turn_b"),
                                new Dictionary<string, bool> { { "mover_0", true } }, none);          // mover_0 leaves
            client.ActAgents(Observed(0.4f, "mover_1", "turn_b"));
            client.ReportAgents(new Dictionary<string, float> { { "mover_1", 2f }, { "turn_a", 1f } }, Observed(0.5f, "mover_1", "turn_a"), none, none);
            client.ActAgents(Observed(0.5f, "mover_1", "turn_a"));
            client.ReportAgents(new Dictionary<string, float> { { "mover_1", 1f } }, Observed(0.6f, "mover_1", "turn_a"), none,
                                new Dictionary<string, bool> { { "__all__", true } });
        }
        Refused(() => client.Act(0, A));
        Console.WriteLine("episodes=" + client.Stats.Episodes + " steps=" + client.Stats.Steps);
    }

    static void Misuse(EnvClient client)
    {
        Refused(() => client.Report(0, 1f, B, false, false));
        client.Act(0, A);
        Refused(() => client.Act(0, A));
        Refused(() => client.Report(0, float.NaN, B, false, false));
        Refused(() => client.Report(0, 1f, new float[3], false, false));
        client.Report(0, 1f, B, false, false);
        Refused(() => client.Act(0, C));
        Refused(() => client.ActMany(new[] { 0, 1 }, new[] { B }));
    }
}
