// A simulator's connection to an RLlib learner over RLlink (PROTOCOL.md sections 6 and 10), one call at a time.
//
// Every call connects first if needed: PING with the extensions offered
// (want_steps, ack, endpoints, ...; auth with a secret), through the
// learner's directory to the least-loaded runner when given the directory's
// address. A learner that is not up yet is waited for (ConnectWait). Batches
// are numbered (ack) and kept until the runner confirms them, at most
// MaxUnacked at a time; with Reliable a dropped connection is opened again
// (through the directory) and what was not confirmed is sent again, in
// order. The C# side of the Python client.connection, the C++ rlinks::Client
// and the JavaScript Client.
using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using System.Threading;

namespace Rlinks
{
    public sealed class ClientOptions
    {
        /// <summary>How long to wait for any reply (on-policy: includes the learner's training step).</summary>
        public TimeSpan Timeout = TimeSpan.FromSeconds(30);
        public TimeSpan ConnectTimeout = TimeSpan.FromSeconds(10);
        /// <summary>Attempts per connection (and reconnections per call when Reliable).</summary>
        public int RetryAttempts = 5;
        public TimeSpan BackoffInitial = TimeSpan.FromMilliseconds(200);
        public TimeSpan BackoffCap = TimeSpan.FromSeconds(10);
        /// <summary>
        /// How long the first connection keeps trying a learner that is not up yet (connection refused),
        /// beyond RetryAttempts: the Python client's connect_wait. Zero: only the RetryAttempts attempts.
        /// Default 60 s, or $RLINKS_CONNECT_WAIT_S when set.
        /// </summary>
        public TimeSpan ConnectWait = DefaultConnectWait();
        /// <summary>Reconnect after a dropped connection and resend what the runner has not confirmed.</summary>
        public bool Reliable = true;
        /// <summary>Batches sent and not yet confirmed at most; then a send waits for an ACK.</summary>
        public int MaxUnacked = 16;
        /// <summary>After the learner's shutting_down, how long a reliable client tries to reconnect before the run ends.</summary>
        public TimeSpan ShutdownGrace = TimeSpan.FromSeconds(30);
        public List<string> Extensions = new List<string>(Client.DefaultExtensions);
        public int MaxFrameBytes = Limits.DefaultMaxFrameBytes;
        /// <summary>The shared secret (PROTOCOL.md 10.3), or null; $RLINKS_SECRET when null and set.</summary>
        public string Secret;
        public TlsOptions Tls = new TlsOptions();
        public string Agent = "rlinks-csharp/" + Client.Version;
        /// <summary>Where warnings go (standard error by default).</summary>
        public Action<string> Warn = text => Console.Error.WriteLine("rlinks: " + text);

        public const string ConnectWaitVariable = "RLINKS_CONNECT_WAIT_S";
        public static readonly TimeSpan DefaultConnectWaitTime = TimeSpan.FromSeconds(60);

        static TimeSpan DefaultConnectWait()
        {
            string text = Environment.GetEnvironmentVariable(ConnectWaitVariable);
            if (string.IsNullOrEmpty(text)) return DefaultConnectWaitTime;
            double seconds;
            if (!double.TryParse(text, NumberStyles.Float, CultureInfo.InvariantCulture, out seconds) || seconds < 0 || seconds > 86400)
                throw new UsageException("$" + ConnectWaitVariable + " must be seconds from 0 to 86400, not '" + text + "'");
            return TimeSpan.FromSeconds(seconds);
        }
    }

    /// <summary>Counters of one client's traffic.</summary>
    public sealed class ClientStats
    {
        public long BatchesSent, StepsSent, BatchesAcked, StepsAcked, BatchesResent, Reconnects, ActsSent, ActRowsSent, EpisodesInterrupted;
        public int Unacked;

        public ClientStats Copy() { return (ClientStats)MemberwiseClone(); }
    }

    public sealed class Client : IDisposable
    {
        public const string Version = "0.1.0";
        const string DirectoryRole = "directory";
        const int MaxServerCodeChars = 64, MaxServerTextChars = 4096;

        /// <summary>What a client offers unless told otherwise (auth is added when there is a secret).</summary>
        public static readonly string[] DefaultExtensions = { Extension.WantSteps, Extension.Ack, Extension.Endpoints };
        static readonly string[] Known =
        {
            Extension.WantSteps, Extension.Ack, Extension.Endpoints, Extension.ServedActions, Extension.ServedTaken, Extension.Takeover,
            Extension.MultiAgent,
        };

        sealed class Batch
        {
            public long? Seq;
            public string Type;
            public byte[] Body;
            public long Steps;
            public int SentOn, Sends;
            public bool Acked;
        }

        public readonly ClientOptions Options;
        readonly Address given;
        readonly byte[] secret;
        readonly object callLock = new object();
        readonly ManualResetEvent stopSignal = new ManualResetEvent(false);
        readonly Random jitter = new Random();

        /// <summary>The address connected to (a runner, once the directory named one).</summary>
        public Address Address { get; private set; }
        /// <summary>Stable across reconnects: the runner recognises resent batches by it.</summary>
        public readonly string ClientId = Guid.NewGuid().ToString("N");
        /// <summary>Whether the server answered a bare PONG (RLlib's own server: no extension).</summary>
        public bool PlainRllib { get; private set; }
        public string ServerAgent { get; private set; }

        Transport transport;
        int generation;
        bool handshaken, closed, usesDirectory, isDirectory, warnedNoAck;
        volatile bool stopped;
        HashSet<string> agreed = new HashSet<string>();
        long nextSeq = 1;
        readonly List<Batch> pending = new List<Batch>();
        Batch awaitingState;
        readonly ClientStats counters = new ClientStats();
        // served_actions: envs with an episode open on the runner as of connection openGeneration,
        // and those whose open episode a dropped connection closed (started again by their next row).
        HashSet<int> openEnvs = new HashSet<int>(), lostEnvs = new HashSet<int>();
        int openGeneration;
        long actionsSeqNo;

        /// <param name="address">host:port, tcp://host:port or tls://host:port (a runner, or the learner's directory)</param>
        /// <exception cref="UsageException">bad options or address</exception>
        public Client(string address, ClientOptions options = null)
        {
            Options = options ?? new ClientOptions();
            var o = Options;
            if (o.Timeout <= TimeSpan.Zero || o.ConnectTimeout <= TimeSpan.Zero) throw new UsageException("timeouts must be positive");
            if (o.RetryAttempts < 1) throw new UsageException("RetryAttempts must be >= 1");
            if (o.MaxUnacked < 1) throw new UsageException("MaxUnacked must be >= 1");
            if (o.ConnectWait < TimeSpan.Zero) throw new UsageException("ConnectWait must not be negative");
            foreach (string name in o.Extensions)
                if (!Known.Contains(name)) throw new UsageException("unknown extension '" + name + "' (known: " + string.Join(", ", Known) + "; auth is offered when there is a secret)");
            string text = o.Secret ?? Environment.GetEnvironmentVariable(SharedSecret.EnvironmentVariable);
            secret = string.IsNullOrEmpty(text) ? null : SharedSecret.Normalize(text);
            given = Address.Parse(address);
            Address = given;
            ServerAgent = "";
        }

        public bool Agreed(string extension) { return agreed.Contains(extension); }
        public bool Connected { get { return transport != null; } }
        public bool Stopped { get { return stopped; } }

        /// <summary>A copy of the counters; any thread.</summary>
        public ClientStats Stats
        {
            get
            {
                lock (counters)
                {
                    ClientStats s = counters.Copy();
                    s.Unacked = pending.Count;
                    return s;
                }
            }
        }

        // ------------------------------------------------------------------
        // Calls

        /// <summary>Connect (and finish the handshake) now rather than on the first call.</summary>
        public void Connect() { Call("Connect", () => 0); }

        /// <summary>The runner's SET_CONFIG message (read it with RunnerConfig.Read).</summary>
        public MsgMap GetConfig()
        {
            return Call("GetConfig", () =>
            {
                Drain();
                SendMessage(Messages.Make(MessageType.GetConfig), "GET_CONFIG");
                return Await(MessageType.SetConfig, "SET_CONFIG (after GET_CONFIG)");
            });
        }

        /// <summary>The current weights.</summary>
        public WeightsUpdate GetState()
        {
            return Update(Call("GetState", () =>
            {
                Drain();
                SendMessage(Messages.Make(MessageType.GetState), "GET_STATE");
                return Await(MessageType.SetState, "SET_STATE (after GET_STATE)");
            }));
        }

        /// <summary>Off-policy: sends a batch of episode states; returns its seq (null without ack) once written.</summary>
        public long? SendEpisodes(List<object> episodes, long steps)
        {
            lock (callLock)
            {
                Run("SendEpisodes", () => { MakeRoom(); return 0; });
                Batch batch = Enqueue(MessageType.Episodes, episodes, steps);
                Run("SendEpisodes", () =>
                {
                    Drain();
                    if (batch.SentOn != generation) SendBatch(batch);
                    return 0;
                });
                return batch.Seq;
            }
        }

        /// <summary>On-policy: sends a batch and waits for the weights trained on it.</summary>
        public WeightsUpdate SendEpisodesAndGetState(List<object> episodes, long steps)
        {
            lock (callLock)
            {
                Run("SendEpisodesAndGetState", () => { MakeRoom(); return 0; });
                Batch batch = Enqueue(MessageType.EpisodesAndGetState, episodes, steps);
                awaitingState = batch;
                try
                {
                    return Update(Run("SendEpisodesAndGetState", () =>
                    {
                        Drain();
                        if (batch.SentOn != generation)
                        {
                            if (batch.SentOn != 0 && batch.Seq == null)
                                // Written on a connection that then dropped, and nothing says whether it arrived:
                                // asking for the weights can't train on it twice.
                                SendMessage(Messages.Make(MessageType.GetState), "GET_STATE");
                            else if (batch.Acked)
                                // Taken by RLlib before the connection dropped (PROTOCOL.md 10.2): never again;
                                // an empty batch without seq gets the weights of the next update.
                                SendMessage(Messages.Make(MessageType.EpisodesAndGetState, "episodes", new List<object>(), "timesteps", 0L),
                                            "EPISODES_AND_GET_STATE (empty)");
                            else SendBatch(batch);
                        }
                        return Await(MessageType.SetState, "SET_STATE (after our on-policy batch)",
                                     "; on-policy, this includes the learner's training step: raise Timeout if it takes longer");
                    }));
                }
                finally { awaitingState = null; }
            }
        }

        /// <summary>
        /// Served actions (PROTOCOL.md 10.5): one ACT with <paramref name="rows"/>, and its ACTIONS. An env's
        /// first row must be a start row, and so must its first row after an ending one. When the connection
        /// drops, the runner closes this client's open episodes; on the next connection each such env starts
        /// again (its next row goes as a start row, an ending row for it is left out): Interrupted names them.
        /// </summary>
        /// <exception cref="NotAgreedException">the runner does not serve actions (or take the simulator's own)</exception>
        public ActionsReply Act(IList<ActRow> rows, long[] obsShape)
        {
            if (!Options.Extensions.Contains(Extension.ServedActions))
                throw new UsageException("Act() needs the served_actions extension: add it to Options.Extensions");
            bool own = rows.Any(r => r.HasTaken || r.Train.HasValue);
            if (own && !Options.Extensions.Contains(Extension.ServedTaken))
                throw new UsageException("rows with a taken action or Train need the served_taken extension: add it to Options.Extensions");
            Served.MakeAct(rows, obsShape);  // the caller's mistakes, found before anything is sent
            Plan(rows, openEnvs, lostEnvs);
            return Call("Act", () =>
            {
                Drain();
                RequireServed(own, rows.Any(r => r.TakeOver));
                if (openGeneration != generation)
                {
                    // A new connection: the runner closed every episode open on the old one.
                    lostEnvs.UnionWith(openEnvs);
                    openEnvs = new HashSet<int>();
                    openGeneration = generation;
                }
                ActPlan plan = Plan(rows, openEnvs, lostEnvs);
                var reply = new ActionsReply { Actions = NdArray.Of(new long[0], 0), WeightsSeqNo = actionsSeqNo };
                if (plan.Rows.Count > 0)
                {
                    SendMessage(Served.MakeAct(plan.Rows, obsShape), "ACT");
                    MsgMap message = Await(MessageType.Actions, "ACTIONS (after our ACT)",
                        "; on-policy, once the runner has its share of the update this includes the learner's training step: raise Timeout if it takes longer");
                    try { reply = Served.ReadActions(message, plan.Wanting); }
                    catch (ProtocolException e) { throw new InvalidMessageException(Address + " answered our ACT wrongly: " + e.Message); }
                    lock (counters) { counters.ActsSent++; counters.ActRowsSent += plan.Rows.Count; }
                    actionsSeqNo = reply.WeightsSeqNo;
                }
                lock (counters) counters.EpisodesInterrupted += plan.Interrupted.Count;
                openEnvs = plan.OpenAfter;
                lostEnvs = plan.LostAfter;
                reply.Interrupted = plan.Interrupted;
                return reply;
            });
        }

        /// <summary>Whether the runner agreed to what served rows with the simulator's own actions need.</summary>
        /// <exception cref="NotAgreedException">it did not</exception>
        public void RequireServed(bool ownActions, bool takeOvers)
        {
            if (!agreed.Contains(Extension.ServedActions))
                throw new NotAgreedException(Address + " did not agree to served_actions: it does not compute actions for its clients ("
                    + (PlainRllib ? "plain RLlink" : "agent '" + ServerAgent + "'") + "); run the policy locally and send episodes instead");
            if (ownActions && !agreed.Contains(Extension.ServedTaken))
                throw new NotAgreedException(Address + " did not agree to served_taken: it records only the actions it computes, so it can't take "
                    + "the simulator's own actions (LogAction) or episodes that are not trained on (StartEpisode with train false)");
            if (takeOvers && !agreed.Contains(Extension.Takeover))
                throw new NotAgreedException(Address + " did not agree to takeover: it would train on-policy on steps the policy did not choose; use LogAction there");
        }

        sealed class ActPlan
        {
            public List<ActRow> Rows = new List<ActRow>();
            public List<int> Wanting = new List<int>(), Interrupted = new List<int>();
            public HashSet<int> OpenAfter, LostAfter;
        }

        ActPlan Plan(IList<ActRow> rows, HashSet<int> open, HashSet<int> lost)
        {
            var plan = new ActPlan { OpenAfter = new HashSet<int>(open), LostAfter = new HashSet<int>(lost) };
            for (int i = 0; i < rows.Count; i++)
            {
                ActRow row = rows[i];
                bool start = row.Start;
                if (plan.LostAfter.Remove(row.Env))
                {
                    plan.Interrupted.Add(row.Env);
                    if (!start && !row.WantsAction) continue;
                    start = true;
                }
                else if (!start && !plan.OpenAfter.Contains(row.Env))
                    throw new UsageException("ACT row " + i + ": env " + row.Env + " has no open episode (its first row, and its first row after one that ends its episode, must be a start row)");
                if (start) plan.OpenAfter.Add(row.Env);
                if (row.WantsAction) plan.Wanting.Add(row.Env);
                else plan.OpenAfter.Remove(row.Env);
                plan.Rows.Add(start == row.Start ? row : row.With(start));
            }
            return plan;
        }

        /// <summary>The runner's modules for <paramref name="agents"/> (multi_agent without a mapping table, PROTOCOL.md 10.6).</summary>
        /// <exception cref="ServerErrorException">bad_episode: an agent the runner's mapping does not know</exception>
        public Dictionary<string, string> GetModules(IList<string> agents)
        {
            var list = new List<object>(agents);
            MsgMap reply = Call("GetModules", () =>
            {
                Drain();
                if (!agreed.Contains(Extension.MultiAgent)) throw new NotAgreedException(Address + " did not agree to multi_agent: it serves one module");
                SendMessage(Messages.Make(MessageType.GetModules, "agents", list), "GET_MODULES");
                return Await(MessageType.Modules, "MODULES (after GET_MODULES)");
            });
            var r = new Dictionary<string, string>();
            foreach (var e in ((MsgMap)reply.Get("modules")).Entries)
            {
                if (!(e.Key is string) || !(e.Value is string)) throw new InvalidMessageException("MODULES: agent ids and module ids must be strs");
                r[(string)e.Key] = (string)e.Value;
            }
            foreach (string agent in agents)
                if (!r.ContainsKey(agent)) throw new InvalidMessageException("MODULES: no module for agent '" + agent + "'");
            return r;
        }

        /// <summary>Waits until every batch sent is confirmed (nothing to do without ack).</summary>
        public void Flush()
        {
            if (closed) throw new UsageException("this client was closed");
            if (pending.Count == 0) return;
            Call("Flush", () =>
            {
                Drain();
                while (pending.Count > 0) AwaitAck("ACK (" + pending.Count + " batch(es) unconfirmed)");
                return 0;
            });
        }

        /// <summary>Any thread: every call, and every wait inside one, throws ClientClosedException from now on.</summary>
        public void Stop()
        {
            stopped = true;
            stopSignal.Set();
            Transport t = transport;
            if (t != null) t.Close();
        }

        /// <summary>Closes for good; unconfirmed batches are given up, with a warning (call Flush first).</summary>
        public void Close()
        {
            if (closed) return;
            closed = true;
            if (pending.Count > 0)
            {
                Warn("closing the connection to " + Address + " with " + pending.Count + " batch(es) not confirmed; call Flush() first to wait for them");
                pending.Clear();
            }
            Discard();
        }

        public void Dispose() { Close(); }

        // ------------------------------------------------------------------
        // Retry and reconnection

        T Call<T>(string what, Func<T> operation)
        {
            lock (callLock) return Run(what, operation);
        }

        /// <summary>
        /// Runs <paramref name="operation"/> on a live connection; when Reliable, reconnects and runs it again
        /// after a drop, so the operation must check what the reconnection resent. When the drop was the
        /// learner's shutting_down and no reconnection works, TrainingEnded is what the call throws.
        /// </summary>
        T Run<T>(string what, Func<T> operation)
        {
            if (closed) throw new UsageException("this client was closed; make a new one");
            if (stopped) throw new ClientClosedException(what + ": stopped");
            int recoveries = 0;
            ServerErrorException shutDown = null;
            DateTime? graceEnds = null;
            while (true)
            {
                try
                {
                    if (transport == null) ConnectWithRetries(graceEnds);
                    return operation();
                }
                catch (RlinksException error) when (!(error is UsageException) && !(error is NotAgreedException))
                {
                    Discard();
                    if (stopped) throw new ClientClosedException(what + ": stopped");
                    var server = error as ServerErrorException;
                    if (error is ConnectionLostException)
                    {
                        if (!Options.Reliable) throw;
                        shutDown = null;
                    }
                    else if (server != null && server.Code == ErrorCode.ShuttingDown)
                    {
                        if (!Options.Reliable || recoveries >= Options.RetryAttempts) throw new TrainingEndedException("the learner stopped: " + server.Text, server);
                        shutDown = server;
                        if (graceEnds == null) graceEnds = DateTime.UtcNow + Options.ShutdownGrace;
                    }
                    else if (error is ConnectFailedException && shutDown != null)
                        throw new TrainingEndedException("the learner stopped: " + shutDown.Text + " (and " + Address + " could not be reached again)", error);
                    else throw;
                    if (recoveries >= Options.RetryAttempts)
                        throw new ConnectionLostException(what + ": the connection to " + Address + " kept dropping; gave up after " + recoveries + " reconnection(s). Last error: " + error.Message, error);
                    if (!warnedNoAck && !agreed.Contains(Extension.Ack))
                    {
                        warnedNoAck = true;
                        Warn(Address + " does not acknowledge batches (plain RLlink): a batch in flight when the connection dropped may be lost");
                    }
                    Warn("connection to " + Address + " lost during " + what + " (" + error.Message + "); reconnecting");
                    SleepBackoff(recoveries++, null);
                }
            }
        }

        void SleepBackoff(int failures, DateTime? until)
        {
            double ceiling = Math.Min(Options.BackoffCap.TotalMilliseconds, Options.BackoffInitial.TotalMilliseconds * Math.Pow(2, Math.Min(failures, 30)));
            if (until.HasValue) ceiling = Math.Max(0, Math.Min(ceiling, (until.Value - DateTime.UtcNow).TotalMilliseconds));
            double wait;
            lock (jitter) wait = jitter.NextDouble() * ceiling;
            stopSignal.WaitOne(TimeSpan.FromMilliseconds(wait));
            if (stopped) throw new ClientClosedException("stopped");
        }

        /// <summary>Connects, following the directory, and resends what is unconfirmed.</summary>
        /// <param name="until">give up then, however many attempts are left (the learner's shutdown grace)</param>
        void ConnectWithRetries(DateTime? until)
        {
            string lastError = "";
            Address lost = usesDirectory && Address.ToString() != given.ToString() ? Address : null;
            // A client that never reached its learner waits for one that is not up yet (ConnectWait): refused,
            // or a directory with no runner yet. Not after a shutting_down: that learner was up.
            bool first = !handshaken, waiting = false;
            DateTime waitEnds = DateTime.UtcNow + Options.ConnectWait;
            int attempt = 0;
            for (; attempt < Options.RetryAttempts || (waiting && until == null && DateTime.UtcNow < waitEnds); attempt++)
            {
                // Past RetryAttempts only the wait keeps us here: one last try at its end.
                if (attempt > 0) SleepBackoff(attempt - 1, until ?? (attempt >= Options.RetryAttempts ? waitEnds : (DateTime?)null));
                if (until.HasValue && attempt > 0 && DateTime.UtcNow >= until.Value)
                {
                    lastError = "the learner did not come back within " + Options.ShutdownGrace.TotalSeconds + " s of its shutting_down (" + lastError + ")";
                    break;
                }
                if (usesDirectory) Address = given;
                try
                {
                    Open();
                    Handshake();
                    FollowDirectory(lost);
                    if (handshaken) lock (counters) counters.Reconnects++;
                    handshaken = true;
                    ResendPending();
                    return;
                }
                catch (RlinksException error) when (error is ConnectionLostException || (error is ServerErrorException && ((ServerErrorException)error).Code == ErrorCode.ShuttingDown))
                {
                    if (stopped) throw new ClientClosedException("stopped");
                    lastError = error.Message;
                    if (first && !waiting && until == null && Options.ConnectWait > TimeSpan.Zero && error is ConnectionLostException)
                    {
                        waiting = true;
                        Warn("waiting up to " + Options.ConnectWait.TotalSeconds + " s for the learner at " + given + " to listen (ConnectWait, $"
                             + ClientOptions.ConnectWaitVariable + "): " + lastError);
                    }
                }
                catch (Exception)
                {
                    Discard();
                    if (stopped) throw new ClientClosedException("stopped");
                    throw;
                }
                Discard();
            }
            throw new ConnectFailedException("could not connect to " + Address + " after " + attempt + " attempt(s)" + (waiting ? " and the connect wait" : "")
                + ": " + lastError + "; is the learner running and is the port right?");
        }

        void Open()
        {
            transport = Transport.Open(Address, Options.ConnectTimeout, Options.Timeout, Options.Tls, Options.MaxFrameBytes);
            if (stopped) transport.Close();
            agreed = new HashSet<string>();
            generation++;
        }

        void Handshake()
        {
            var offered = new List<string>(Options.Extensions);
            var extra = new List<object> { "client_id", ClientId };
            byte[] clientNonce = null;
            if (secret != null)
            {
                offered.Add(Extension.Auth);
                clientNonce = SharedSecret.NewNonce();
                extra.Add(SharedSecret.NonceKey);
                extra.Add(clientNonce);
            }
            SendMessage(Messages.Make(MessageType.Ping, Offer.Key, Offer.Make(offered, Options.Agent, extra.ToArray())), "PING");
            MsgMap reply = Await(MessageType.Pong, "PONG (the handshake)",
                "; the server took the connection but did not answer. RLlib's own server serves one client at a time: is another client connected to it?");
            Offer answer = Offer.Parse(reply);
            PlainRllib = answer == null;
            ServerAgent = answer == null ? "" : answer.Agent;
            agreed = Offer.Agreed(answer, offered);
            isDirectory = answer != null && (answer.Map.Get("role") as string) == DirectoryRole;
            // A directory with the secret proves it like a runner (PROTOCOL.md 10.4).
            if (secret != null) Authenticate(clientNonce, answer);
        }

        void Authenticate(byte[] clientNonce, Offer answer)
        {
            if (answer == null || !answer.Extensions.Contains(Extension.Auth))
                throw new AuthFailedException(Address + " did not agree to authenticate: with a secret this client talks only to a runner that proves it knows it");
            var serverNonce = answer.Map.Get(SharedSecret.NonceKey) as byte[];
            if (serverNonce == null || serverNonce.Length != SharedSecret.NonceBytes)
                throw new AuthFailedException(Address + " agreed to authenticate but sent no 32-byte auth_nonce");
            SendMessage(Messages.Make(MessageType.Auth, "proof", SharedSecret.Proof(secret, "client", clientNonce, serverNonce)), "AUTH");
            MsgMap ok = Await(MessageType.AuthOk, "AUTH_OK (authentication)");
            if (!SharedSecret.Same(SharedSecret.Proof(secret, "server", clientNonce, serverNonce), ok.Get("proof") as byte[]))
                throw new AuthFailedException(Address + " did not prove it knows the shared secret; is it the learner you meant?");
        }

        void FollowDirectory(Address lost)
        {
            if (!isDirectory) return;
            usesDirectory = true;
            Address directory = Address;
            SendMessage(Messages.Make(MessageType.GetEndpoints), "GET_ENDPOINTS");
            MsgMap reply = Await(MessageType.Endpoints, "ENDPOINTS (from the directory)");
            Discard();
            // Least-loaded first, as the directory sent them, but the runner just lost last: the
            // directory learns that a runner is cut off only after the learner's next iteration.
            var runners = new List<Address>();
            foreach (object entry in (List<object>)reply.Get("endpoints"))
            {
                var e = entry as MsgMap;
                if (e == null || !(e.Get("host") is string) || !(e.Get("port") is long)) continue;
                long port = (long)e.Get("port");
                if (port < 1 || port > 65535) continue;
                runners.Add(given.At((string)e.Get("host"), (int)port));
            }
            if (lost != null) runners = runners.OrderBy(r => r.ToString() == lost.ToString() ? 1 : 0).ToList();
            var tried = new List<string>();
            foreach (Address runner in runners)
            {
                Address = runner;
                try
                {
                    Open();
                    Handshake();
                    if (isDirectory) throw new ConnectionLostException("it is a directory too");
                    return;
                }
                catch (RlinksException error) when (error is ConnectionLostException || error is ServerErrorException || error is RlinksTimeoutException
                                                    || (error is ProtocolException && !(error is AuthFailedException)))
                {
                    tried.Add(runner + " (" + error.Message + ")");
                }
                Discard();
            }
            Address = directory;
            throw new ConnectionLostException("the directory at " + directory + " lists no runner that answers" + (tried.Count > 0 ? ": " + string.Join("; ", tried) : " yet"));
        }

        void ResendPending()
        {
            if (pending.Count == 0) return;
            if (!agreed.Contains(Extension.Ack))
            {
                Warn(Address + " no longer acknowledges batches; " + pending.Count + " unconfirmed batch(es) may be lost");
                pending.Clear();
                return;
            }
            // A copy: an ACK read while a SET_STATE is awaited below takes its batch out of the window.
            foreach (Batch batch in pending.ToList())
            {
                if (batch.Acked) continue;
                SendBatch(batch);
                if (batch.Type == MessageType.EpisodesAndGetState && batch != awaitingState)
                    // Sent again, an on-policy batch is owed a SET_STATE before anything else;
                    // its weights went to the call that sent it first: read and drop.
                    Await(MessageType.SetState, "SET_STATE (owed for on-policy batch " + batch.Seq + ", sent again)");
            }
        }

        void Discard()
        {
            Transport t = transport;
            transport = null;
            if (t != null) t.Close();
            if (pending.Count > 0 && !Options.Reliable)
            {
                Warn("connection to " + Address + " closed with " + pending.Count + " batch(es) not confirmed; they may be lost (Reliable resends them)");
                pending.Clear();
            }
        }

        // ------------------------------------------------------------------
        // Batches

        Batch Enqueue(string type, List<object> episodes, long steps)
        {
            var fields = new List<object> { "episodes", episodes, "timesteps", steps };
            var batch = new Batch { Type = type, Steps = steps };
            bool acknowledged = agreed.Contains(Extension.Ack);
            if (acknowledged)
            {
                batch.Seq = nextSeq++;
                fields.Add("seq");
                fields.Add(batch.Seq.Value);
            }
            batch.Body = MsgPack.Encode(Messages.Make(type, fields.ToArray()));
            if (acknowledged) pending.Add(batch);
            return batch;
        }

        void MakeRoom()
        {
            Drain();
            while (pending.Count >= Options.MaxUnacked)
                AwaitAck("ACK (" + pending.Count + " batches unconfirmed, MaxUnacked=" + Options.MaxUnacked + ")");
        }

        void SendBatch(Batch batch)
        {
            SendBody(batch.Body, batch.Type);
            batch.SentOn = generation;
            lock (counters)
            {
                if (++batch.Sends == 1) { counters.BatchesSent++; counters.StepsSent += batch.Steps; }
                else counters.BatchesResent++;
            }
        }

        void OnAck(long seq)
        {
            int i = pending.FindIndex(b => b.Seq == seq);
            if (i >= 0)
            {
                Batch batch = pending[i];
                pending.RemoveAt(i);
                batch.Acked = true;
                lock (counters) { counters.BatchesAcked++; counters.StepsAcked += batch.Steps; }
                return;
            }
            if (seq > 0 && seq < nextSeq) return;  // confirmed before; a resend gets a second ACK
            throw new UnexpectedMessageException(Address + " acknowledged seq " + seq + ", which was never sent (last sent: " + (nextSeq - 1) + ")");
        }

        WeightsUpdate Update(MsgMap setState)
        {
            object want = setState.Get("want_steps");
            var state = (MsgMap)setState.Get("state");
            bool multi = agreed.Contains(Extension.MultiAgent);
            return new WeightsUpdate
            {
                Weights = multi ? null : WeightSet.Read(state),
                Modules = multi ? WeightSet.ReadModules(state) : null,
                WantSteps = agreed.Contains(Extension.WantSteps) && want is long ? (long?)(long)want : null,
            };
        }

        // ------------------------------------------------------------------
        // Messages

        void SendMessage(MsgMap message, string what) { SendBody(MsgPack.Encode(message), what); }

        void SendBody(byte[] body, string what)
        {
            Transport t = transport;
            if (t == null) throw new ConnectionLostException("not connected to " + Address);
            try { t.Send(body); }
            catch (ConnectionLostException e)
            {
                // A server that refuses a frame says why, then closes: its ERROR tells more than "connection reset".
                try
                {
                    for (MsgMap m = t.Poll(); m != null; m = t.Poll())
                        if ((string)m.Get("type") == MessageType.Error) throw ServerError(m);
                }
                catch (ConnectionLostException) { }  // nothing more came before the close: the send's own error says it
                throw new ConnectionLostException("connection to " + Address + " lost while sending " + what + ": " + e.Message, e);
            }
        }

        MsgMap Await(string expected, string what, string hint = "")
        {
            DateTime deadline = DateTime.UtcNow + Options.Timeout;
            while (true)
            {
                Transport t = transport;
                if (t == null) throw new ConnectionLostException("not connected to " + Address);
                MsgMap message = t.Next(deadline);
                if (message == null) throw new RlinksTimeoutException("no " + what + " from " + Address + " within " + Options.Timeout.TotalSeconds + " s" + hint);
                if ((string)message.Get("type") == expected) return message;
                HandleUnsolicited(message, what);
            }
        }

        void AwaitAck(string what)
        {
            Transport t = transport;
            if (t == null) throw new ConnectionLostException("not connected to " + Address);
            MsgMap message = t.Next(DateTime.UtcNow + Options.Timeout);
            if (message == null) throw new RlinksTimeoutException("no " + what + " from " + Address + " within " + Options.Timeout.TotalSeconds + " s");
            HandleUnsolicited(message, what);
        }

        void HandleUnsolicited(MsgMap message, string what)
        {
            var type = (string)message.Get("type");
            if (type == MessageType.Ack && agreed.Contains(Extension.Ack)) { OnAck((long)message.Get("seq")); return; }
            if (type == MessageType.Error) throw ServerError(message);
            throw new UnexpectedMessageException(Address + " sent " + type + " while we waited for " + what);
        }

        /// <summary>Takes in what the server sent between calls (ACKs, an ERROR, a close) without waiting.</summary>
        void Drain()
        {
            Transport t = transport;
            if (t == null) throw new ConnectionLostException("not connected to " + Address);
            for (MsgMap m = t.Poll(); m != null; m = t.Poll()) HandleUnsolicited(m, "the next call");
        }

        static ServerErrorException ServerError(MsgMap m)
        {
            var code = (string)m.Get("code");
            var text = (string)m.Get("message");
            return new ServerErrorException(code.Length > MaxServerCodeChars ? code.Substring(0, MaxServerCodeChars) : code,
                                            text.Length > MaxServerTextChars ? text.Substring(0, MaxServerTextChars) : text);
        }

        void Warn(string text) { Options.Warn(text); }
    }
}
