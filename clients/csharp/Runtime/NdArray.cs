// numpy arrays and scalars as msgpack-numpy writes them (PROTOCOL.md section 4).
//
// An array map is {nd: true, type, kind: b"", shape, data} and a scalar map
// {nd: false, type, data}, all keys bin. Decoding checks the dtype (only
// kinds b i u f c S U; object, structured, datetime arrays are refused as
// unsafe_payload, before their data is looked at) and that data is bin of
// exactly product(shape) x itemsize bytes. The bytes are kept as they came
// and read on demand in their byte order.
using System;
using System.Collections.Generic;
using System.Text;

namespace Rlinks
{
    /// <summary>A numpy dtype's str (<c>&lt;f4</c>, <c>|u1</c>, <c>&gt;i8</c>): byte order, kind, item size.</summary>
    public sealed class Dtype
    {
        public readonly string Str;
        public readonly char Kind;
        public readonly int ItemSize;
        public readonly bool BigEndian;

        /// <summary>The longest dtype string accepted (PROTOCOL.md 12).</summary>
        public const int MaxChars = 16;

        Dtype(string str, char kind, int size, bool big) { Str = str; Kind = kind; ItemSize = size; BigEndian = big; }

        public static readonly Dtype Float32 = Parse("<f4");
        public static readonly Dtype Float64 = Parse("<f8");
        public static readonly Dtype Int64 = Parse("<i8");
        public static readonly Dtype Bool = Parse("|b1");

        /// <exception cref="UnsafePayloadException">object, void (structured), datetime or timedelta kinds</exception>
        /// <exception cref="DecodeException">anything else numpy's dtype.str does not write</exception>
        public static Dtype Parse(string s)
        {
            if (s.Length == 0 || s.Length > MaxChars) throw new DecodeException("array type '" + Cut(s) + "' is not a numpy dtype");
            int at = 0;
            bool big = false;
            if (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=') { big = s[0] == '>'; at = 1; }
            if (at >= s.Length) throw new DecodeException("array type '" + s + "' is not a numpy dtype");
            char kind = s[at];
            if ("OVMm".IndexOf(kind) >= 0) throw new UnsafePayloadException("array type '" + s + "' (kind " + kind + ") is not allowed: only bool, int, uint, float, complex, bytes and str arrays are decoded");
            string digits = s.Substring(at + 1);
            int size;
            if (digits.Length == 0 || digits.Length > 6 || !AllDigits(digits) || !int.TryParse(digits, out size) || size <= 0)
                throw new DecodeException("array type '" + s + "' is not a numpy dtype");
            bool ok;
            switch (kind)
            {
                case 'b': ok = size == 1; break;
                case 'i': case 'u': ok = size == 1 || size == 2 || size == 4 || size == 8; break;
                case 'f': ok = size == 2 || size == 4 || size == 8; break;
                case 'c': ok = size == 8 || size == 16; break;
                case 'S': ok = true; break;
                case 'U': ok = size <= int.MaxValue / 4; size *= 4; break;
                default: throw new DecodeException("array type '" + s + "' is not a numpy dtype");
            }
            if (!ok) throw new DecodeException("array type '" + s + "' has no such item size");
            return new Dtype(s, kind, size, big);
        }

        static bool AllDigits(string s)
        {
            foreach (char c in s) if (c < '0' || c > '9') return false;
            return true;
        }

        static string Cut(string s) { return s.Length > 20 ? s.Substring(0, 20) + "..." : s; }

        public bool IsNumeric { get { return "biuf".IndexOf(Kind) >= 0; } }
    }

    /// <summary>An n-d array (or, with <see cref="IsScalar"/>, a numpy scalar): dtype, shape and raw bytes in C order.</summary>
    public sealed class NdArray
    {
        public readonly Dtype Dtype;
        public readonly long[] Shape;
        public readonly byte[] Data;
        public readonly bool IsScalar;

        static readonly byte[] NdKey = Encoding.ASCII.GetBytes("nd");
        static readonly byte[] TypeKey = Encoding.ASCII.GetBytes("type");
        static readonly byte[] KindKey = Encoding.ASCII.GetBytes("kind");
        static readonly byte[] ShapeKey = Encoding.ASCII.GetBytes("shape");
        static readonly byte[] DataKey = Encoding.ASCII.GetBytes("data");

        public NdArray(Dtype dtype, long[] shape, byte[] data, bool isScalar = false)
        {
            Dtype = dtype;
            Shape = shape;
            Data = data;
            IsScalar = isScalar;
            if (data.LongLength != Count * dtype.ItemSize)
                throw new DecodeException("array of shape [" + string.Join(", ", shape) + "] and type " + dtype.Str + " needs " + Count * dtype.ItemSize + " bytes; data has " + data.Length);
        }

        /// <summary>How many elements.</summary>
        public long Count
        {
            get
            {
                long n = 1;
                foreach (long d in Shape) n *= d;
                return n;
            }
        }

        // ------------------------------------------------------------------
        // Making arrays to send

        public static NdArray Of(float[] values, params long[] shape)
        {
            var data = new byte[values.Length * 4];
            Buffer.BlockCopy(values, 0, data, 0, data.Length);
            if (!BitConverter.IsLittleEndian) Swap(data, 4);
            return new NdArray(Dtype.Float32, shape.Length == 0 && values.Length != 1 ? new long[] { values.Length } : shape, data);
        }

        public static NdArray Of(long[] values, params long[] shape)
        {
            var data = new byte[values.Length * 8];
            Buffer.BlockCopy(values, 0, data, 0, data.Length);
            if (!BitConverter.IsLittleEndian) Swap(data, 8);
            return new NdArray(Dtype.Int64, shape.Length == 0 && values.Length != 1 ? new long[] { values.Length } : shape, data);
        }

        public static NdArray Of(bool[] values)
        {
            var data = new byte[values.Length];
            for (int i = 0; i < values.Length; i++) data[i] = values[i] ? (byte)1 : (byte)0;
            return new NdArray(Dtype.Bool, new long[] { values.Length }, data);
        }

        static void Swap(byte[] data, int size)
        {
            for (int i = 0; i < data.Length; i += size) Array.Reverse(data, i, size);
        }

        /// <summary>msgpack-numpy's map of this array, keys in its order (nd, type, kind, shape, data).</summary>
        public MsgMap ToWire()
        {
            var map = new MsgMap();
            map.AddRaw(NdKey, !IsScalar);
            map.AddRaw(TypeKey, Dtype.Str);
            if (!IsScalar)
            {
                map.AddRaw(KindKey, new byte[0]);
                var shape = new List<object>();
                foreach (long d in Shape) shape.Add(d);
                map.AddRaw(ShapeKey, shape);
            }
            map.AddRaw(DataKey, Data);
            return map;
        }

        // ------------------------------------------------------------------
        // Reading arrays received

        /// <summary>A map whose keys are all bin: a numpy array or scalar, or (no 'nd' key) a plain map kept as it is.</summary>
        /// <exception cref="UnsafePayloadException">a disallowed kind or dtype</exception>
        /// <exception cref="DecodeException">a malformed array map</exception>
        internal static object FromWireMap(MsgMap map)
        {
            object nd = map.GetBin("nd");
            if (nd == null) return map;  // msgpack-numpy's complex form, or free-form data: left to the reader
            if (!(nd is bool)) throw new DecodeException("numpy map: 'nd' must be a bool");
            object kind = map.GetBin("kind");
            if (kind != null && !(kind is byte[] && ((byte[])kind).Length == 0))
                throw new UnsafePayloadException("numpy map: kind " + Describe(kind) + " (object or structured array) is never decoded");
            var type = map.GetBin("type") as string;
            if (type == null) throw new UnsafePayloadException("numpy map: a 'type' that is not a str (a structured dtype) is never decoded");
            Dtype dtype = Dtype.Parse(type);
            object data = map.GetBin("data");
            if (!(data is byte[])) throw new DecodeException("numpy map: 'data' must be bin (a packer without use_bin_type wrote str)");
            if (!(bool)nd) return new NdArray(dtype, new long[0], (byte[])data, true);
            var shapeList = map.GetBin("shape") as List<object>;
            if (shapeList == null) throw new DecodeException("numpy map: 'shape' must be a list of ints");
            var shape = new long[shapeList.Count];
            long count = 1;
            for (int i = 0; i < shape.Length; i++)
            {
                if (!(shapeList[i] is long) || (long)shapeList[i] < 0) throw new DecodeException("numpy map: 'shape' must hold non-negative ints");
                shape[i] = (long)shapeList[i];
                count = shape[i] == 0 || count == 0 ? 0 : (count > int.MaxValue / shape[i] ? int.MaxValue : count * shape[i]);
            }
            if (count * dtype.ItemSize != ((byte[])data).LongLength)
                throw new DecodeException("numpy map: shape [" + string.Join(", ", shape) + "] of " + type + " needs " + count * dtype.ItemSize + " bytes; data has " + ((byte[])data).Length);
            return new NdArray(dtype, shape, (byte[])data);
        }

        static string Describe(object o)
        {
            var b = o as byte[];
            return b != null ? "b'" + Encoding.ASCII.GetString(b) + "'" : (o == null ? "nil" : o.ToString());
        }

        byte[] Item(long i, int offset, int size)
        {
            var r = new byte[size];
            Buffer.BlockCopy(Data, (int)(i * Dtype.ItemSize) + offset, r, 0, size);
            if (Dtype.BigEndian == BitConverter.IsLittleEndian) Array.Reverse(r);
            return r;
        }

        /// <summary>Element <paramref name="i"/> (C order) as a double; kinds b, i, u, f (the real part of c).</summary>
        public double GetDouble(long i)
        {
            switch (Dtype.Kind)
            {
                case 'b': return Data[i] != 0 ? 1 : 0;
                case 'f':
                    if (Dtype.ItemSize == 2) return HalfToDouble(BitConverter.ToUInt16(Item(i, 0, 2), 0));
                    if (Dtype.ItemSize == 4) return BitConverter.ToSingle(Item(i, 0, 4), 0);
                    return BitConverter.ToDouble(Item(i, 0, 8), 0);
                case 'c':
                    return Dtype.ItemSize == 8 ? BitConverter.ToSingle(Item(i, 0, 4), 0) : BitConverter.ToDouble(Item(i, 0, 8), 0);
                case 'i': return GetLong(i);
                case 'u': return Dtype.ItemSize == 8 ? (double)GetULong(i) : GetLong(i);
                default: throw new InvalidMessageException("an array of type " + Dtype.Str + " where numbers were expected");
            }
        }

        /// <summary>Element <paramref name="i"/> as a long; kinds b, i, u (u8 above long.MaxValue refused).</summary>
        public long GetLong(long i)
        {
            int size = Dtype.ItemSize;
            switch (Dtype.Kind)
            {
                case 'b': return Data[i] != 0 ? 1 : 0;
                case 'i':
                    if (size == 1) return (sbyte)Data[i];
                    if (size == 2) return BitConverter.ToInt16(Item(i, 0, 2), 0);
                    if (size == 4) return BitConverter.ToInt32(Item(i, 0, 4), 0);
                    return BitConverter.ToInt64(Item(i, 0, 8), 0);
                case 'u':
                    ulong u = GetULong(i);
                    if (u > long.MaxValue) throw new InvalidMessageException("uint64 " + u + " does not fit where an int was expected");
                    return (long)u;
                case 'f':
                    double d = GetDouble(i);
                    if (d != Math.Floor(d) || Math.Abs(d) > 9e15) throw new InvalidMessageException("a float array where whole numbers were expected");
                    return (long)d;
                default: throw new InvalidMessageException("an array of type " + Dtype.Str + " where ints were expected");
            }
        }

        /// <summary>Element <paramref name="i"/> of an unsigned array.</summary>
        public ulong GetULong(long i)
        {
            int size = Dtype.ItemSize;
            if (size == 1) return Data[i];
            if (size == 2) return BitConverter.ToUInt16(Item(i, 0, 2), 0);
            if (size == 4) return BitConverter.ToUInt32(Item(i, 0, 4), 0);
            return BitConverter.ToUInt64(Item(i, 0, 8), 0);
        }

        /// <summary>The imaginary part of complex element <paramref name="i"/>.</summary>
        public double GetImaginary(long i)
        {
            int half = Dtype.ItemSize / 2;
            return half == 4 ? BitConverter.ToSingle(Item(i, 4, 4), 0) : BitConverter.ToDouble(Item(i, 8, 8), 0);
        }

        /// <summary>Every element as a float (the arithmetic of RLlib's float32 modules).</summary>
        public float[] ToFloats()
        {
            var r = new float[Count];
            for (long i = 0; i < r.LongLength; i++) r[i] = (float)GetDouble(i);
            return r;
        }

        static double HalfToDouble(ushort h)
        {
            int sign = (h >> 15) != 0 ? -1 : 1;
            int exponent = (h >> 10) & 0x1f;
            int mantissa = h & 0x3ff;
            if (exponent == 0) return sign * mantissa * Math.Pow(2, -24);
            if (exponent == 31) return mantissa == 0 ? sign * double.PositiveInfinity : double.NaN;
            return sign * (1 + mantissa / 1024.0) * Math.Pow(2, exponent - 15);
        }
    }
}
