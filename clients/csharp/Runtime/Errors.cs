// Every error this client raises, and the error codes of PROTOCOL.md section 11.
//
// The tree mirrors the Python package's (rlinks_rllib/protocol/errors.py and
// client/errors.py): ProtocolException and its subclasses say the peer broke
// the protocol and carry the code an ERROR message names; the client's own
// failures (ConnectFailed, ConnectionLost, Timeout, ...) say what to do next.
using System;
using System.Collections.Generic;

namespace Rlinks
{
    /// <summary>The codes an ERROR message carries (PROTOCOL.md section 11), spelled as on the wire.</summary>
    public static class ErrorCode
    {
        public const string ProtocolError = "protocol_error";
        public const string BadFrame = "bad_frame";
        public const string FrameTooLarge = "frame_too_large";
        public const string BadBody = "bad_body";
        public const string UnsafePayload = "unsafe_payload";
        public const string InvalidMessage = "invalid_message";
        public const string UnsupportedMessage = "unsupported_message";
        public const string AuthFailed = "auth_failed";
        public const string LimitExceeded = "limit_exceeded";
        public const string BadEpisode = "bad_episode";
        public const string ServerError = "server_error";
        public const string ShuttingDown = "shutting_down";
        public const string UnexpectedMessage = "unexpected_message";

        /// <summary>Every code, for the test that holds them equal to Python's ErrorCode.</summary>
        public static readonly string[] All =
        {
            ProtocolError, BadFrame, FrameTooLarge, BadBody, UnsafePayload, InvalidMessage, UnsupportedMessage,
            AuthFailed, LimitExceeded, BadEpisode, ServerError, ShuttingDown, UnexpectedMessage,
        };
    }

    /// <summary>The root of every error this library raises.</summary>
    public class RlinksException : Exception
    {
        public RlinksException(string message, Exception inner = null) : base(message, inner) { }
    }

    /// <summary>The peer broke the protocol; <see cref="Code"/> is what an ERROR message would name.</summary>
    public class ProtocolException : RlinksException
    {
        public string Code { get; }
        public ProtocolException(string message, string code = ErrorCode.ProtocolError) : base(message) { Code = code; }
    }

    /// <summary>A header that is not 8 ASCII digits, an empty body, or a stream that ended inside a frame.</summary>
    public class FrameException : ProtocolException
    {
        public FrameException(string message, string code = ErrorCode.BadFrame) : base(message, code) { }
    }

    /// <summary>A frame longer than the receiver's limit, refused from its header.</summary>
    public class FrameTooLargeException : FrameException
    {
        public FrameTooLargeException(string message) : base(message, ErrorCode.FrameTooLarge) { }
    }

    /// <summary>A body that is not one valid msgpack value of RLlink's profile.</summary>
    public class DecodeException : ProtocolException
    {
        public DecodeException(string message, string code = ErrorCode.BadBody) : base(message, code) { }
    }

    /// <summary>An object, structured or otherwise disallowed array: never decoded.</summary>
    public class UnsafePayloadException : DecodeException
    {
        public UnsafePayloadException(string message) : base(message, ErrorCode.UnsafePayload) { }
    }

    /// <summary>Not a map, no str type, a required field missing or of the wrong type.</summary>
    public class InvalidMessageException : ProtocolException
    {
        public InvalidMessageException(string message, string code = ErrorCode.InvalidMessage) : base(message, code) { }
    }

    /// <summary>An unknown type, an old-API-stack type, or a type out of place.</summary>
    public class UnsupportedMessageException : InvalidMessageException
    {
        public UnsupportedMessageException(string message, string code = ErrorCode.UnsupportedMessage) : base(message, code) { }
    }

    /// <summary>A known message the server sent out of turn (a reply nobody asked for).</summary>
    public class UnexpectedMessageException : UnsupportedMessageException
    {
        public UnexpectedMessageException(string message) : base(message, ErrorCode.UnexpectedMessage) { }
    }

    /// <summary>The peer did not complete the shared-secret exchange (PROTOCOL.md 10.3).</summary>
    public class AuthFailedException : ProtocolException
    {
        public AuthFailedException(string message) : base(message, ErrorCode.AuthFailed) { }
    }

    /// <summary>The server sent ERROR {code, message} and closed.</summary>
    public class ServerErrorException : RlinksException
    {
        public string Code { get; }
        public string Text { get; }
        public ServerErrorException(string code, string text) : base("the server refused us: " + code + ": " + text)
        {
            Code = code;
            Text = text;
        }
    }

    /// <summary>No attempt to connect worked (the learner is not up, the port is wrong, ...).</summary>
    public class ConnectFailedException : RlinksException
    {
        public ConnectFailedException(string message, Exception inner = null) : base(message, inner) { }
    }

    /// <summary>The connection dropped (and the client is not reliable, or it kept dropping).</summary>
    public class ConnectionLostException : RlinksException
    {
        public ConnectionLostException(string message, Exception inner = null) : base(message, inner) { }
    }

    /// <summary>A reply did not come within the client's timeout.</summary>
    public class RlinksTimeoutException : RlinksException
    {
        public RlinksTimeoutException(string message) : base(message) { }
    }

    /// <summary>Stop() was called: every call, and every wait inside one, ends with this.</summary>
    public class ClientClosedException : RlinksException
    {
        public ClientClosedException(string message) : base(message) { }
    }

    /// <summary>A call out of order or of the wrong size; the message says what to do instead.</summary>
    public class UsageException : RlinksException
    {
        public UsageException(string message) : base(message) { }
    }

    /// <summary>The runner did not agree to an extension the call needs (served actions, take-overs, ...).</summary>
    public class NotAgreedException : RlinksException
    {
        public NotAgreedException(string message) : base(message) { }
    }

    /// <summary>A module this client can't run itself; automatic inference then asks the runner for actions.</summary>
    public class UnsupportedModelException : RlinksException
    {
        public UnsupportedModelException(string message) : base(message) { }
    }

    /// <summary>The learner ended the run (ERROR shutting_down, and it did not come back).</summary>
    public class TrainingEndedException : RlinksException
    {
        public TrainingEndedException(string message, Exception inner = null) : base(message, inner) { }
    }
}
