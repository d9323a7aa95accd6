// Replays tests/vectors/ through this client's framing, codec and message checks, for tests/test_csharp_client.py.
//
//   mono vectors.exe DIR < cases      each line of cases: "NAME MAX_FRAME_BYTES"
//   mono vectors.exe --names          the error codes, message types and extensions this client knows
//
// For each case it writes one JSON line: the messages decoded (in the
// vectors' tagged JSON form), each re-encoded as hex, and the error (code,
// and "feed" or "eof"), once fed in one piece and once byte by byte. The
// test compares them with NAME.json; C# has no JSON reader in its base
// library for .NET Standard 2.0, so the comparing is Python's.
using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Text;
using Rlinks;

static class Vectors
{
    static int Main(string[] args)
    {
        if (args.Length == 1 && args[0] == "--names")
        {
            Console.WriteLine("{\"error_codes\": " + Json(new List<object>(ErrorCode.All)) + ", \"message_types\": " + Json(new List<object>(MessageType.Current))
                + ", \"old_api_types\": " + Json(new List<object>(MessageType.OldApi)) + ", \"extensions\": " + Json(new List<object>(Extension.All)) + "}");
            return 0;
        }
        string dir = args[0];
        for (string line = Console.ReadLine(); line != null; line = Console.ReadLine())
        {
            string[] parts = line.Split(' ');
            byte[] stream = File.ReadAllBytes(Path.Combine(dir, parts[0] + ".bin"));
            int max = int.Parse(parts[1], CultureInfo.InvariantCulture);
            string whole = Replay(stream, max, stream.Length);
            string bytewise = Replay(stream, max, 1);
            Console.WriteLine("{\"name\": " + Json(parts[0]) + ", \"whole\": " + whole + ", \"bytewise\": " + bytewise + "}");
        }
        return 0;
    }

    static string Replay(byte[] stream, int max, int step)
    {
        var decoder = new FrameDecoder(max);
        var messages = new List<object>();
        var encoded = new List<object>();
        string error = "null";
        try
        {
            for (int at = 0; at < stream.Length; at += step)
            {
                decoder.Feed(stream, at, Math.Min(step, stream.Length - at));
                for (byte[] body = decoder.Next(); body != null; body = decoder.Next())
                {
                    object message = MsgPack.Decode(body);
                    Messages.Validate(message);
                    messages.Add(message);
                    encoded.Add(Hex(MsgPack.Encode(message)));
                }
            }
            try { decoder.EndOfStream(); }
            catch (ProtocolException e) { error = "{\"code\": " + Json(e.Code) + ", \"when\": \"eof\", \"message\": " + Json(e.Message) + "}"; }
        }
        catch (ProtocolException e) { error = "{\"code\": " + Json(e.Code) + ", \"when\": \"feed\", \"message\": " + Json(e.Message) + "}"; }
        return "{\"messages\": " + Json(messages) + ", \"encoded\": " + Json(encoded) + ", \"error\": " + error + "}";
    }

    static string Hex(byte[] b)
    {
        var s = new StringBuilder(b.Length * 2);
        foreach (byte x in b) s.Append(x.ToString("x2"));
        return s.ToString();
    }

    static string Number(double d)
    {
        if (double.IsNaN(d)) return "NaN";
        if (double.IsInfinity(d)) return d > 0 ? "Infinity" : "-Infinity";
        return d.ToString("R", CultureInfo.InvariantCulture);
    }

    static string Element(NdArray a, long i)
    {
        switch (a.Dtype.Kind)
        {
            case 'b': return a.GetLong(i) != 0 ? "true" : "false";
            case 'i': return a.GetLong(i).ToString(CultureInfo.InvariantCulture);
            case 'u': return a.GetULong(i).ToString(CultureInfo.InvariantCulture);
            case 'f': return Number(a.GetDouble(i));
            case 'c': return "[" + Number(a.GetDouble(i)) + ", " + Number(a.GetImaginary(i)) + "]";
            default: return Json(Hex(a.Data));
        }
    }

    static string Json(object v)
    {
        if (v == null) return "null";
        if (v is bool) return (bool)v ? "true" : "false";
        if (v is long || v is ulong) return Convert.ToString(v, CultureInfo.InvariantCulture);
        if (v is double) return Number((double)v);
        if (v is float) return Number((float)v);
        var s = v as string;
        if (s != null)
        {
            var o = new StringBuilder("\"");
            foreach (char c in s)
            {
                if (c == '"' || c == '\\') o.Append('\\').Append(c);
                else if (c < 0x20 || c > 0x7e) o.Append("\\u").Append(((int)c).ToString("x4"));
                else o.Append(c);
            }
            return o.Append('"').ToString();
        }
        var bytes = v as byte[];
        if (bytes != null) return "{\"$bytes\": \"" + Hex(bytes) + "\"}";
        var array = v as NdArray;
        if (array != null)
        {
            if (array.IsScalar) return "{\"$scalar\": {\"dtype\": " + Json(array.Dtype.Str) + ", \"data\": " + Element(array, 0) + "}}";
            var items = new List<string>();
            for (long i = 0; i < array.Count; i++) items.Add(Element(array, i));
            return "{\"$ndarray\": {\"dtype\": " + Json(array.Dtype.Str) + ", \"shape\": [" + string.Join(", ", array.Shape) + "], \"data\": [" + string.Join(", ", items) + "]}}";
        }
        var map = v as MsgMap;
        if (map != null)
        {
            var items = new List<string>();
            foreach (var e in map.Entries)
                items.Add((e.Key is string ? Json(e.Key) : Json("$key:" + (e.Key is byte[] ? Hex((byte[])e.Key) : Convert.ToString(e.Key, CultureInfo.InvariantCulture)))) + ": " + Json(e.Value));
            return "{" + string.Join(", ", items) + "}";
        }
        var list = v as System.Collections.IList;
        if (list != null)
        {
            var items = new List<string>();
            foreach (object x in list) items.Add(Json(x));
            return "[" + string.Join(", ", items) + "]";
        }
        throw new ArgumentException("no JSON form for " + v.GetType());
    }
}
