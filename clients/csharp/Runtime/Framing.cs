// RLlink's framing (PROTOCOL.md section 2): 8 ASCII digits of body length, then the body.
//
// The decoder is fed bytes as they arrive and hands out whole bodies. It
// refuses a header that is not exactly 8 ASCII digits, an empty body, and a
// length over its limit as soon as the header is read (before buffering any
// of the body); each body's buffer is allocated once from its header.
using System;
using System.Collections.Generic;
using System.Text;

namespace Rlinks
{
    public static class Limits
    {
        /// <summary>The header's length in bytes.</summary>
        public const int HeaderBytes = 8;
        /// <summary>The largest body 8 digits can announce.</summary>
        public const int MaxBodyBytes = 99999999;
        /// <summary>The receiver's default frame limit: 64 MiB.</summary>
        public const int DefaultMaxFrameBytes = 64 * 1024 * 1024;
    }

    /// <summary>Turns a stream of bytes into message bodies, one frame at a time.</summary>
    public sealed class FrameDecoder
    {
        readonly int maxFrameBytes;
        readonly byte[] header = new byte[Limits.HeaderBytes];
        int headerFill;
        byte[] body;
        int bodyFill;
        readonly Queue<byte[]> ready = new Queue<byte[]>();
        FrameException failed;

        public FrameDecoder(int maxFrameBytes = Limits.DefaultMaxFrameBytes)
        {
            if (maxFrameBytes < 1) throw new UsageException("the frame limit must be at least 1 byte");
            this.maxFrameBytes = Math.Min(maxFrameBytes, Limits.MaxBodyBytes);
        }

        /// <summary>Takes in <paramref name="count"/> bytes; whole bodies become available from <see cref="Next"/>.</summary>
        /// <exception cref="FrameException">a bad header or an empty body (bad_frame)</exception>
        /// <exception cref="FrameTooLargeException">a body over the limit, from its header</exception>
        public void Feed(byte[] data, int offset, int count)
        {
            if (failed != null) throw failed;
            try { FeedFrames(data, offset, count); }
            catch (FrameException e)
            {
                // The bodies before the bad frame are the peer's too: they are handed out first, then the error.
                failed = e;
                if (ready.Count == 0) throw;
            }
        }

        void FeedFrames(byte[] data, int offset, int count)
        {
            int end = offset + count;
            while (offset < end)
            {
                if (body == null)
                {
                    int take = Math.Min(Limits.HeaderBytes - headerFill, end - offset);
                    Buffer.BlockCopy(data, offset, header, headerFill, take);
                    headerFill += take;
                    offset += take;
                    if (headerFill < Limits.HeaderBytes) return;
                    int length = ParseHeader(header);
                    headerFill = 0;
                    body = new byte[length];
                    bodyFill = 0;
                }
                int want = Math.Min(body.Length - bodyFill, end - offset);
                Buffer.BlockCopy(data, offset, body, bodyFill, want);
                bodyFill += want;
                offset += want;
                if (bodyFill == body.Length)
                {
                    ready.Enqueue(body);
                    body = null;
                }
            }
        }

        int ParseHeader(byte[] h)
        {
            int length = 0;
            foreach (byte c in h)
            {
                if (c < (byte)'0' || c > (byte)'9')
                    throw new FrameException("frame header " + Show(h) + " is not 8 ASCII digits");
                length = length * 10 + (c - '0');
            }
            if (length == 0) throw new FrameException("frame header 00000000: an empty body");
            if (length > maxFrameBytes)
                throw new FrameTooLargeException("a frame of " + length + " bytes is over this receiver's limit of " + maxFrameBytes);
            return length;
        }

        static string Show(byte[] h)
        {
            var s = new StringBuilder("'");
            foreach (byte c in h) s.Append(c >= 0x20 && c < 0x7f ? ((char)c).ToString() : "\\x" + c.ToString("x2"));
            return s.Append("'").ToString();
        }

        /// <summary>The next whole body, or null when none is ready.</summary>
        /// <exception cref="FrameException">every body before a bad frame was handed out: now its error</exception>
        public byte[] Next()
        {
            if (ready.Count > 0) return ready.Dequeue();
            if (failed != null) throw failed;
            return null;
        }

        /// <summary>The stream ended: refused if it ended inside a frame.</summary>
        /// <exception cref="FrameException">the stream ended inside a header or a body</exception>
        public void EndOfStream()
        {
            if (headerFill > 0) throw new FrameException("the stream ended inside a frame header (" + headerFill + " of 8 bytes)");
            if (body != null) throw new FrameException("the stream ended inside a frame body (" + bodyFill + " of " + body.Length + " bytes)");
        }

        /// <summary>The frame (header and body) of a message body.</summary>
        /// <exception cref="FrameTooLargeException">a body over 99,999,999 bytes: split the data over several messages</exception>
        public static byte[] Frame(byte[] body)
        {
            if (body.Length > Limits.MaxBodyBytes)
                throw new FrameTooLargeException("a body of " + body.Length + " bytes is over RLlink's 99,999,999: send the data in several messages");
            var frame = new byte[Limits.HeaderBytes + body.Length];
            Encoding.ASCII.GetBytes(body.Length.ToString("D8")).CopyTo(frame, 0);
            Buffer.BlockCopy(body, 0, frame, Limits.HeaderBytes, body.Length);
            return frame;
        }
    }
}
