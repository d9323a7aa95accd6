// Where a client connects: "host:port", "tcp://host:port" or "tls://host:port" (a runner, or the learner's directory).
using System;
using System.Globalization;

namespace Rlinks
{
    public sealed class Address
    {
        public readonly bool Tls;
        public readonly string Host;
        public readonly int Port;

        public Address(bool tls, string host, int port) { Tls = tls; Host = host; Port = port; }

        /// <exception cref="UsageException">not host:port with a port from 1 to 65535, or another scheme</exception>
        public static Address Parse(string text)
        {
            if (string.IsNullOrEmpty(text)) throw new UsageException("an address is 'host:port', 'tcp://host:port' or 'tls://host:port'");
            bool tls = false;
            string rest = text;
            int sep = text.IndexOf("://", StringComparison.Ordinal);
            if (sep >= 0)
            {
                string scheme = text.Substring(0, sep).ToLowerInvariant();
                if (scheme == "tls") tls = true;
                else if (scheme != "tcp")
                    throw new UsageException("unknown scheme '" + scheme + "' in '" + text + "': use tcp:// or tls:// (WebSocket is the JavaScript client's)");
                rest = text.Substring(sep + 3).TrimEnd('/');
            }
            int colon = rest.LastIndexOf(':');
            int port;
            if (colon <= 0 || !int.TryParse(rest.Substring(colon + 1), NumberStyles.None, CultureInfo.InvariantCulture, out port) || port < 1 || port > 65535)
                throw new UsageException("'" + text + "' is not host:port (port 1 to 65535)");
            string host = rest.Substring(0, colon);
            if (host.StartsWith("[") && host.EndsWith("]")) host = host.Substring(1, host.Length - 2);
            return new Address(tls, host, port);
        }

        /// <summary>A runner's address in the same scheme as this one (the directory's).</summary>
        public Address At(string host, int port) { return new Address(Tls, host, port); }

        public override string ToString()
        {
            string shown = Host.Contains(":") ? "[" + Host + "]" : Host;
            return (Tls ? "tls://" : "") + shown + ":" + Port;
        }

    }
}
