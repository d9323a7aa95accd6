// The shared-secret exchange (PROTOCOL.md 10.3): both sides prove they know K without sending it.
//
//   PING {rlinks: {.., auth_nonce: Nc}}  ->   <- PONG {rlinks: {.., auth_nonce: Ns}}
//   AUTH {proof: HMAC-SHA256(K, "rlinks-auth-v1" 0 "client" 0 Nc Ns)}  ->
//   <- AUTH_OK {proof: HMAC-SHA256(K, "rlinks-auth-v1" 0 "server" 0 Nc Ns)}
using System;
using System.Security.Cryptography;
using System.Text;

namespace Rlinks
{
    public static class SharedSecret
    {
        public const string NonceKey = "auth_nonce";
        public const int NonceBytes = 32;
        public const int ProofBytes = 32;
        public const int MinSecretBytes = 16;
        public const int MaxSecretBytes = 4096;
        /// <summary>Where a secret is read from when none is given (as the Python client does).</summary>
        public const string EnvironmentVariable = "RLINKS_SECRET";
        static readonly byte[] Label = Encoding.ASCII.GetBytes("rlinks-auth-v1");

        /// <summary>The secret's bytes: surrounding whitespace stripped, UTF-8.</summary>
        /// <exception cref="UsageException">shorter than 16 bytes, or longer than 4,096</exception>
        public static byte[] Normalize(string secret)
        {
            byte[] key = new UTF8Encoding(false, true).GetBytes(secret.Trim());
            if (key.Length < MinSecretBytes) throw new UsageException("the shared secret must be at least " + MinSecretBytes + " bytes (it has " + key.Length + ")");
            if (key.Length > MaxSecretBytes) throw new UsageException("the shared secret must be at most " + MaxSecretBytes + " bytes");
            return key;
        }

        public static byte[] NewNonce()
        {
            var nonce = new byte[NonceBytes];
            using (var random = RandomNumberGenerator.Create()) random.GetBytes(nonce);
            return nonce;
        }

        /// <summary>HMAC-SHA256(K, label 0 side 0 Nc Ns); side is "client" or "server".</summary>
        public static byte[] Proof(byte[] key, string side, byte[] clientNonce, byte[] serverNonce)
        {
            byte[] who = Encoding.ASCII.GetBytes(side);
            var message = new byte[Label.Length + 1 + who.Length + 1 + clientNonce.Length + serverNonce.Length];
            int at = 0;
            Label.CopyTo(message, at); at += Label.Length + 1;
            who.CopyTo(message, at); at += who.Length + 1;
            clientNonce.CopyTo(message, at); at += clientNonce.Length;
            serverNonce.CopyTo(message, at);
            using (var hmac = new HMACSHA256(key)) return hmac.ComputeHash(message);
        }

        /// <summary>Compares two proofs in time independent of where they differ.</summary>
        public static bool Same(byte[] a, byte[] b)
        {
            if (a == null || b == null || a.Length != b.Length) return false;
            int diff = 0;
            for (int i = 0; i < a.Length; i++) diff |= a[i] ^ b[i];
            return diff == 0;
        }
    }
}
