// One TCP (or TLS) connection carrying RLlink frames, read by a thread of its own.
//
// The reader thread decodes frames into a bounded queue of messages (when it
// is full the thread stops reading and TCP pushes back), so a caller can wait
// for the next message with a deadline, or take what has come without
// waiting, over TLS too (SslStream buffers what a socket poll can't see).
// Close() from any thread ends every wait at once.
using System;
using System.Collections.Generic;
using System.IO;
using System.Net.Security;
using System.Net.Sockets;
using System.Security.Authentication;
using System.Security.Cryptography.X509Certificates;
using System.Threading;

namespace Rlinks
{
    /// <summary>TLS settings: the CA that signed the runners' certificate (the system's when null) and an optional client certificate.</summary>
    public sealed class TlsOptions
    {
        /// <summary>PEM file of the CA to trust; null: the system's trust store.</summary>
        public string CaFile;
        /// <summary>PKCS#12 (.pfx/.p12) file of a client certificate with its key, for runners that ask for one; null: none.</summary>
        public string ClientCertificateFile;
        public string ClientCertificatePassword;
    }

    public sealed class Transport : IDisposable
    {
        /// <summary>Messages read ahead of the caller at most; then the reader waits (back-pressure, no unbounded buffer).</summary>
        public const int MaxQueuedMessages = 64;

        readonly Socket socket;
        readonly Stream stream;
        readonly Address address;
        readonly FrameDecoder decoder;
        readonly Queue<MsgMap> queue = new Queue<MsgMap>();
        readonly object gate = new object();
        Exception ended;  // why reading stopped (ConnectionLost, a ProtocolException, ...)
        volatile bool closed;
        readonly Thread reader;

        Transport(Socket socket, Stream stream, Address address, int maxFrameBytes)
        {
            this.socket = socket;
            this.stream = stream;
            this.address = address;
            decoder = new FrameDecoder(maxFrameBytes);
            reader = new Thread(Read) { IsBackground = true, Name = "rlinks reader " + address };
            reader.Start();
        }

        /// <summary>Connects (and for tls:// completes the TLS handshake) within <paramref name="connectTimeout"/>.</summary>
        /// <exception cref="ConnectionLostException">refused, unreachable, timed out</exception>
        /// <exception cref="ProtocolException">TLS failed: the runner's certificate is not trusted (auth_failed)</exception>
        public static Transport Open(Address address, TimeSpan connectTimeout, TimeSpan ioTimeout, TlsOptions tls, int maxFrameBytes)
        {
            var socket = new Socket(AddressFamily.InterNetworkV6, SocketType.Stream, ProtocolType.Tcp) { DualMode = true, NoDelay = true };
            try
            {
                IAsyncResult pending = socket.BeginConnect(address.Host, address.Port, null, null);
                if (!pending.AsyncWaitHandle.WaitOne(connectTimeout))
                    throw new ConnectionLostException("connecting to " + address + " took longer than " + connectTimeout.TotalSeconds + " s");
                socket.EndConnect(pending);
                socket.SendTimeout = (int)Math.Min(int.MaxValue, ioTimeout.TotalMilliseconds);
                socket.SetSocketOption(SocketOptionLevel.Socket, SocketOptionName.KeepAlive, true);
                Stream stream = new NetworkStream(socket, true);
                if (address.Tls) stream = StartTls(stream, address, connectTimeout, tls ?? new TlsOptions());
                return new Transport(socket, stream, address, maxFrameBytes);
            }
            catch (SocketException e)
            {
                socket.Close();
                throw new ConnectionLostException("could not connect to " + address + ": " + e.Message, e);
            }
            catch (Exception)
            {
                socket.Close();
                throw;
            }
        }

        static Stream StartTls(Stream plain, Address address, TimeSpan timeout, TlsOptions options)
        {
            X509Certificate2 ca = options.CaFile == null ? null : ReadPemCertificate(options.CaFile);
            string why = null;
            RemoteCertificateValidationCallback check = (sender, certificate, chain, errors) =>
            {
                why = TrustProblem(certificate, errors, ca, address.Host);
                return why == null;
            };
            var ssl = new SslStream(plain, false, check);
            var clientCertificates = new X509CertificateCollection();
            if (options.ClientCertificateFile != null)
                clientCertificates.Add(new X509Certificate2(options.ClientCertificateFile, options.ClientCertificatePassword ?? ""));
            try
            {
                IAsyncResult pending = ssl.BeginAuthenticateAsClient(address.Host, clientCertificates, SslProtocols.Tls12, false, null, null);
                if (!pending.AsyncWaitHandle.WaitOne(timeout))
                    throw new ConnectionLostException("the TLS handshake with " + address + " took longer than " + timeout.TotalSeconds + " s");
                ssl.EndAuthenticateAsClient(pending);
                return ssl;
            }
            catch (AuthenticationException e)
            {
                ssl.Dispose();
                throw new AuthFailedException("TLS with " + address + " failed: " + (why ?? e.Message));
            }
            catch (IOException e)
            {
                ssl.Dispose();
                if (why != null) throw new AuthFailedException("TLS with " + address + " failed: " + why);
                throw new ConnectionLostException("TLS with " + address + " failed: " + e.Message, e);
            }
        }

        /// <summary>Null when the runner's certificate chains to <paramref name="ca"/> (or the system's CAs) and names the host.</summary>
        static string TrustProblem(X509Certificate certificate, SslPolicyErrors errors, X509Certificate2 ca, string host)
        {
            if (certificate == null) return "the server sent no certificate";
            if ((errors & SslPolicyErrors.RemoteCertificateNameMismatch) != 0)
                return "the server's certificate is not for '" + host + "' (connect by the name it was issued to)";
            if (ca == null) return errors == SslPolicyErrors.None ? null : "the server's certificate is not trusted by this system (" + errors + "); give the CA file";
            using (var chain = new X509Chain())
            {
                chain.ChainPolicy.RevocationMode = X509RevocationMode.NoCheck;
                chain.ChainPolicy.VerificationFlags = X509VerificationFlags.AllowUnknownCertificateAuthority;
                chain.ChainPolicy.ExtraStore.Add(ca);
                if (!chain.Build(new X509Certificate2(certificate)))
                    return "the server's certificate is not trusted: it does not chain to the CA given";
                var root = chain.ChainElements[chain.ChainElements.Count - 1].Certificate;
                if (root.Thumbprint != ca.Thumbprint) return "the server's certificate is not trusted: it was not issued by the CA given";
            }
            return null;
        }

        /// <summary>The first certificate of a PEM file.</summary>
        /// <exception cref="UsageException">no certificate in it</exception>
        public static X509Certificate2 ReadPemCertificate(string path)
        {
            string text = File.ReadAllText(path);
            const string begin = "-----BEGIN CERTIFICATE-----", end = "-----END CERTIFICATE-----";
            int from = text.IndexOf(begin, StringComparison.Ordinal);
            int to = from < 0 ? -1 : text.IndexOf(end, from, StringComparison.Ordinal);
            if (from < 0 || to < 0) throw new UsageException(path + " holds no PEM certificate");
            string body = text.Substring(from + begin.Length, to - from - begin.Length);
            return new X509Certificate2(Convert.FromBase64String(body.Replace("\r", "").Replace("\n", "").Trim()));
        }

        void Read()
        {
            var buffer = new byte[1 << 16];
            Exception why = null;
            try
            {
                while (!closed)
                {
                    int n = stream.Read(buffer, 0, buffer.Length);
                    if (n == 0)
                    {
                        decoder.EndOfStream();
                        why = new ConnectionLostException("the server at " + address + " closed the connection");
                        break;
                    }
                    decoder.Feed(buffer, 0, n);
                    for (byte[] body = decoder.Next(); body != null; body = decoder.Next())
                    {
                        object decoded = MsgPack.Decode(body);
                        Messages.Validate(decoded);
                        lock (gate)
                        {
                            while (queue.Count >= MaxQueuedMessages && !closed) Monitor.Wait(gate);
                            queue.Enqueue((MsgMap)decoded);
                            Monitor.PulseAll(gate);
                        }
                    }
                }
            }
            catch (ProtocolException e) { why = e; }
            // A closed or reset stream: Mono's SslStream reports a read cut short by Close() as an
            // AggregateException (or InvalidOperationException) around ObjectDisposedException.
            catch (Exception e) when (e is IOException || e is ObjectDisposedException || e is SocketException
                                      || e is AggregateException || e is InvalidOperationException)
            {
                why = new ConnectionLostException(closed ? "connection to " + address + " closed" : "connection to " + address + " lost: " + Inner(e), e);
            }
            lock (gate)
            {
                ended = why ?? new ConnectionLostException("connection to " + address + " closed");
                Monitor.PulseAll(gate);
            }
        }

        static string Inner(Exception e) { return e.InnerException != null ? e.InnerException.Message : e.Message; }

        /// <summary>The next message, waiting until <paramref name="deadline"/> (UTC); null when none came by then.</summary>
        /// <exception cref="ConnectionLostException">the connection ended and every message before that was taken</exception>
        /// <exception cref="ProtocolException">the server sent bytes that are not RLlink</exception>
        public MsgMap Next(DateTime deadline)
        {
            lock (gate)
            {
                while (queue.Count == 0)
                {
                    if (ended != null) Rethrow();
                    TimeSpan left = deadline - DateTime.UtcNow;
                    if (left <= TimeSpan.Zero) return null;
                    Monitor.Wait(gate, left > TimeSpan.FromSeconds(1) ? TimeSpan.FromSeconds(1) : left);
                }
                MsgMap m = queue.Dequeue();
                Monitor.PulseAll(gate);
                return m;
            }
        }

        /// <summary>A message already received, or null; never waits.</summary>
        public MsgMap Poll()
        {
            lock (gate)
            {
                if (queue.Count > 0)
                {
                    MsgMap m = queue.Dequeue();
                    Monitor.PulseAll(gate);
                    return m;
                }
                if (ended != null) Rethrow();
                return null;
            }
        }

        void Rethrow()
        {
            if (ended is ProtocolException)
            {
                var p = (ProtocolException)ended;
                throw new ProtocolException(p.Message, p.Code);
            }
            throw new ConnectionLostException(ended.Message, ended);
        }

        /// <summary>Writes one frame holding <paramref name="body"/>.</summary>
        /// <exception cref="ConnectionLostException">the write failed or timed out</exception>
        public void Send(byte[] body)
        {
            byte[] frame = FrameDecoder.Frame(body);
            try
            {
                stream.Write(frame, 0, frame.Length);
                stream.Flush();
            }
            catch (Exception e) when (e is IOException || e is ObjectDisposedException || e is SocketException || e is NotSupportedException
                                      || e is AggregateException || e is InvalidOperationException)
            {
                throw new ConnectionLostException("connection to " + address + " lost while sending: " + Inner(e), e);
            }
        }

        /// <summary>Closes the connection; any thread, any time; every wait ends.</summary>
        public void Close()
        {
            if (closed) return;
            closed = true;
            try { socket.Shutdown(SocketShutdown.Both); }
            catch (SocketException) { }  // already reset by the peer: nothing left to shut down
            catch (ObjectDisposedException) { }  // already closed
            stream.Dispose();
            lock (gate) Monitor.PulseAll(gate);
        }

        public void Dispose() { Close(); }
    }
}
