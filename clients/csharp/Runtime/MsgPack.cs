// msgpack as RLlink uses it (PROTOCOL.md section 3): msgpack-python's output with use_bin_type=True.
//
// Values decode to: null, bool, long (ulong above long.MaxValue), double
// (float for float32), string, byte[] (bin), List<object> (array), MsgMap
// (map, keys in wire order), and NdArray for msgpack-numpy's array and
// scalar maps (section 4). Encoding writes the shortest integer forms and
// float64 for double, as msgpack-python does, so a decoded canonical vector
// encodes back to the same bytes. Extension types are refused; nesting is
// bounded; a body must hold exactly one value.
using System;
using System.Collections.Generic;
using System.IO;
using System.Text;

namespace Rlinks
{
    /// <summary>A msgpack map that keeps its keys in order (message fields, episode states).</summary>
    public sealed class MsgMap
    {
        readonly List<KeyValuePair<object, object>> entries = new List<KeyValuePair<object, object>>();
        readonly Dictionary<string, int> byName = new Dictionary<string, int>();

        public int Count { get { return entries.Count; } }
        public IEnumerable<KeyValuePair<object, object>> Entries { get { return entries; } }

        /// <summary>Sets a str key (replacing its value, keeping its place) and returns this map, for chaining.</summary>
        public MsgMap Set(string key, object value)
        {
            int at;
            if (byName.TryGetValue(key, out at)) entries[at] = new KeyValuePair<object, object>(key, value);
            else
            {
                byName[key] = entries.Count;
                entries.Add(new KeyValuePair<object, object>(key, value));
            }
            return this;
        }

        /// <summary>Adds a key of any type (a bin key inside numpy maps), as it came off the wire.</summary>
        public void AddRaw(object key, object value)
        {
            var name = key as string;
            if (name != null && !byName.ContainsKey(name)) byName[name] = entries.Count;
            entries.Add(new KeyValuePair<object, object>(key, value));
        }

        public bool Has(string key) { return byName.ContainsKey(key); }

        /// <summary>The value of a str key, or null when absent.</summary>
        public object Get(string key)
        {
            int at;
            return byName.TryGetValue(key, out at) ? entries[at].Value : null;
        }

        /// <summary>The value of a bin key (numpy maps), or null when absent.</summary>
        public object GetBin(string key)
        {
            byte[] want = Encoding.ASCII.GetBytes(key);
            foreach (var e in entries)
            {
                var k = e.Key as byte[];
                if (k != null && MsgPack.SameBytes(k, want)) return e.Value;
            }
            return null;
        }
    }

    /// <summary>The msgpack codec: Encode one value, Decode one body.</summary>
    public static class MsgPack
    {
        /// <summary>Nesting refused beyond this (msgpack-python's own stack refuses about as deep).</summary>
        public const int MaxDepth = 1000;

        static readonly UTF8Encoding StrictUtf8 = new UTF8Encoding(false, true);

        public static bool SameBytes(byte[] a, byte[] b)
        {
            if (a.Length != b.Length) return false;
            for (int i = 0; i < a.Length; i++) if (a[i] != b[i]) return false;
            return true;
        }

        // ------------------------------------------------------------------
        // Encoding

        /// <summary>The msgpack bytes of <paramref name="value"/>.</summary>
        /// <exception cref="UsageException">a value of a type msgpack has no form for here</exception>
        public static byte[] Encode(object value)
        {
            var output = new MemoryStream();
            Write(output, value);
            return output.ToArray();
        }

        public static void Write(Stream o, object value)
        {
            if (value == null) { o.WriteByte(0xc0); return; }
            if (value is bool) { o.WriteByte((bool)value ? (byte)0xc3 : (byte)0xc2); return; }
            if (value is string) { WriteString(o, (string)value); return; }
            if (value is byte[]) { WriteBin(o, (byte[])value); return; }
            if (value is double) { o.WriteByte(0xcb); WriteBig(o, BitConverter.DoubleToInt64Bits((double)value), 8); return; }
            if (value is float) { o.WriteByte(0xca); WriteBig(o, BitConverter.ToInt32(BitConverter.GetBytes((float)value), 0), 4); return; }
            if (value is ulong) { WriteUnsigned(o, (ulong)value); return; }
            if (value is long || value is int || value is short || value is sbyte || value is byte || value is ushort || value is uint)
            {
                long v = Convert.ToInt64(value);
                if (v >= 0) WriteUnsigned(o, (ulong)v); else WriteNegative(o, v);
                return;
            }
            var map = value as MsgMap;
            if (map != null)
            {
                WriteHeader(o, map.Count, 0x80, 0xde, 0xdf, 16);
                foreach (var e in map.Entries) { Write(o, e.Key); Write(o, e.Value); }
                return;
            }
            var array = value as NdArray;
            if (array != null) { Write(o, array.ToWire()); return; }
            var list = value as System.Collections.IList;
            if (list != null)
            {
                WriteHeader(o, list.Count, 0x90, 0xdc, 0xdd, 16);
                foreach (var item in list) Write(o, item);
                return;
            }
            throw new UsageException("msgpack has no form for a " + value.GetType().Name + " here");
        }

        static void WriteHeader(Stream o, int n, int fix, int op16, int op32, int fixLimit)
        {
            if (n < fixLimit) o.WriteByte((byte)(fix | n));
            else if (n <= 0xffff) { o.WriteByte((byte)op16); WriteBig(o, n, 2); }
            else { o.WriteByte((byte)op32); WriteBig(o, n, 4); }
        }

        static void WriteString(Stream o, string s)
        {
            byte[] b = StrictUtf8.GetBytes(s);
            if (b.Length < 32) o.WriteByte((byte)(0xa0 | b.Length));
            else if (b.Length <= 0xff) { o.WriteByte(0xd9); o.WriteByte((byte)b.Length); }
            else if (b.Length <= 0xffff) { o.WriteByte(0xda); WriteBig(o, b.Length, 2); }
            else { o.WriteByte(0xdb); WriteBig(o, b.Length, 4); }
            o.Write(b, 0, b.Length);
        }

        static void WriteBin(Stream o, byte[] b)
        {
            if (b.Length <= 0xff) { o.WriteByte(0xc4); o.WriteByte((byte)b.Length); }
            else if (b.Length <= 0xffff) { o.WriteByte(0xc5); WriteBig(o, b.Length, 2); }
            else { o.WriteByte(0xc6); WriteBig(o, b.Length, 4); }
            o.Write(b, 0, b.Length);
        }

        static void WriteUnsigned(Stream o, ulong v)
        {
            if (v < 0x80) o.WriteByte((byte)v);
            else if (v <= 0xff) { o.WriteByte(0xcc); o.WriteByte((byte)v); }
            else if (v <= 0xffff) { o.WriteByte(0xcd); WriteBig(o, (long)v, 2); }
            else if (v <= 0xffffffff) { o.WriteByte(0xce); WriteBig(o, (long)v, 4); }
            else { o.WriteByte(0xcf); WriteBig(o, unchecked((long)v), 8); }
        }

        static void WriteNegative(Stream o, long v)
        {
            if (v >= -32) o.WriteByte(unchecked((byte)(sbyte)v));
            else if (v >= sbyte.MinValue) { o.WriteByte(0xd0); o.WriteByte(unchecked((byte)(sbyte)v)); }
            else if (v >= short.MinValue) { o.WriteByte(0xd1); WriteBig(o, v, 2); }
            else if (v >= int.MinValue) { o.WriteByte(0xd2); WriteBig(o, v, 4); }
            else { o.WriteByte(0xd3); WriteBig(o, v, 8); }
        }

        static void WriteBig(Stream o, long v, int bytes)
        {
            for (int i = bytes - 1; i >= 0; i--) o.WriteByte((byte)(v >> (8 * i)));
        }

        // ------------------------------------------------------------------
        // Decoding

        /// <summary>The one value a body holds.</summary>
        /// <exception cref="DecodeException">not one valid msgpack value (bad_body)</exception>
        /// <exception cref="UnsafePayloadException">an object, structured or otherwise disallowed array</exception>
        public static object Decode(byte[] body)
        {
            var reader = new Reader(body);
            object value = reader.Value(0);
            if (reader.Position != body.Length)
                throw new DecodeException("the body holds more than one msgpack value (" + (body.Length - reader.Position) + " bytes after the first)");
            return value;
        }

        sealed class Reader
        {
            readonly byte[] b;
            public int Position;

            public Reader(byte[] body) { b = body; }

            void Need(int n)
            {
                if (n < 0 || Position + n > b.Length) throw new DecodeException("the body ends inside a msgpack value");
            }

            byte Byte() { Need(1); return b[Position++]; }

            ulong Big(int n)
            {
                Need(n);
                ulong v = 0;
                for (int i = 0; i < n; i++) v = (v << 8) | b[Position++];
                return v;
            }

            int Length(int n)
            {
                ulong v = Big(n);
                if (v > int.MaxValue) throw new DecodeException("a msgpack length of " + v + " is more than a body can hold");
                return (int)v;
            }

            byte[] Bytes(int n)
            {
                Need(n);
                var r = new byte[n];
                Buffer.BlockCopy(b, Position, r, 0, n);
                Position += n;
                return r;
            }

            string Str(int n)
            {
                Need(n);
                try
                {
                    string s = StrictUtf8.GetString(b, Position, n);
                    Position += n;
                    return s;
                }
                catch (ArgumentException e)
                {
                    throw new DecodeException("a msgpack str that is not UTF-8: " + e.Message);
                }
            }

            public object Value(int depth)
            {
                if (depth > MaxDepth) throw new DecodeException("msgpack nested deeper than " + MaxDepth + " levels");
                byte op = Byte();
                if (op <= 0x7f) return (long)op;
                if (op >= 0xe0) return (long)(sbyte)op;
                if ((op & 0xe0) == 0xa0) return Str(op & 0x1f);
                if ((op & 0xf0) == 0x90) return Array(op & 0x0f, depth);
                if ((op & 0xf0) == 0x80) return Map(op & 0x0f, depth);
                switch (op)
                {
                    case 0xc0: return null;
                    case 0xc2: return false;
                    case 0xc3: return true;
                    case 0xc4: return Bytes(Length(1));
                    case 0xc5: return Bytes(Length(2));
                    case 0xc6: return Bytes(Length(4));
                    case 0xca: return BitConverter.ToSingle(BitConverter.GetBytes((int)Big(4)), 0);
                    case 0xcb: return BitConverter.Int64BitsToDouble((long)Big(8));
                    case 0xcc: return (long)Big(1);
                    case 0xcd: return (long)Big(2);
                    case 0xce: return (long)Big(4);
                    case 0xcf:
                        {
                            ulong v = Big(8);
                            if (v <= long.MaxValue) return (long)v;
                            return v;
                        }
                    case 0xd0: return (long)(sbyte)Big(1);
                    case 0xd1: return (long)(short)Big(2);
                    case 0xd2: return (long)(int)Big(4);
                    case 0xd3: return (long)Big(8);
                    case 0xd9: return Str(Length(1));
                    case 0xda: return Str(Length(2));
                    case 0xdb: return Str(Length(4));
                    case 0xdc: return Array(Length(2), depth);
                    case 0xdd: return Array(Length(4), depth);
                    case 0xde: return Map(Length(2), depth);
                    case 0xdf: return Map(Length(4), depth);
                    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: case 0xc7: case 0xc8: case 0xc9:
                        throw new DecodeException("msgpack extension types are not part of RLlink (type byte 0x" + op.ToString("x2") + ")");
                    default:
                        throw new DecodeException("0x" + op.ToString("x2") + " is not a msgpack type byte");
                }
            }

            List<object> Array(int n, int depth)
            {
                // Each entry takes at least one byte: a count beyond what is left is a lie, refused before allocating.
                Need(n);
                var list = new List<object>(n);
                for (int i = 0; i < n; i++) list.Add(Value(depth + 1));
                return list;
            }

            object Map(int n, int depth)
            {
                Need(2 * n);
                var map = new MsgMap();
                bool binKeys = n > 0;
                for (int i = 0; i < n; i++)
                {
                    object key = Value(depth + 1);
                    if (!(key is byte[])) binKeys = false;
                    map.AddRaw(key, Value(depth + 1));
                }
                if (binKeys) return NdArray.FromWireMap(map);
                return map;
            }
        }
    }
}
