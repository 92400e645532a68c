//! Typed errors shared by every backend, so the engine can decide retry vs. fail without
//! knowing which store produced them.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found: {0}")]
    NotFound(String),

    #[error("HTTP {status}{}: {message}", code.as_deref().map(|c| format!(" {c}")).unwrap_or_default())]
    Http {
        status: u16,
        code: Option<String>,
        message: String,
        retry_after: Option<Duration>,
    },

    /// Connection refused/reset, timeouts, truncated bodies: the request may not have completed.
    /// `cause` is set where the error is made, from the error's type, never read from its text.
    #[error("transport: {message}")]
    Transport {
        cause: Interruption,
        message: String,
    },

    /// The store's root does not exist (a Blob container): nothing below it can be listed or
    /// written until it is made (`ferry mk`).
    #[error("root not found: {0}")]
    RootNotFound(String),

    #[error("credentials: {0}")]
    Auth(String),

    // Not a #[source]: the message already includes it, and error chains would repeat it.
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },

    /// Content arrived but is not what was promised (size or MD5 mismatch).
    #[error("integrity: {0}")]
    Integrity(String),

    /// Fewer bytes arrived than a ranged read asked for: an integrity failure (what was staged
    /// from it is discarded), and a truncated body in disguise (retried as one).
    #[error("integrity: {0}")]
    ShortRead(String),

    /// A server-side copy that the service ended without success, or that did not end in time.
    #[error("server-side copy {0}")]
    Copy(String),

    /// The store cannot do this (a capability the trait leaves optional).
    #[error("not supported: {0}")]
    Unsupported(String),

    #[error("{0}")]
    Invalid(String),
}

/// How a request may have been cut off: what a retry of it is counted as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// Refused, reset, or closed before an answer.
    Connection,
    /// Nothing arrived for `--io-timeout` (or a connect timed out).
    Timeout,
    /// A body that ended before its promised length.
    Truncated,
}

impl Interruption {
    fn label(self) -> &'static str {
        match self {
            Interruption::Connection => "connection",
            Interruption::Timeout => "timeout",
            Interruption::Truncated => "truncated",
        }
    }
}

impl StoreError {
    pub fn transport(cause: Interruption, message: impl Into<String>) -> Self {
        StoreError::Transport {
            cause,
            message: message.into(),
        }
    }

    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        StoreError::Io {
            path: path.into(),
            source,
        }
    }

    /// The label under which a retry of this error is counted, or None if retrying cannot help.
    pub fn retry_label(&self) -> Option<String> {
        match self {
            StoreError::Http { status, .. } => match status {
                408 | 429 | 500 | 502 | 503 | 504 => Some(status.to_string()),
                _ => None,
            },
            StoreError::Transport { cause, .. } => Some(cause.label().into()),
            StoreError::ShortRead(_) => Some(Interruption::Truncated.label().into()),
            _ => None,
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            StoreError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound(_))
    }

    /// Content not what was promised: what was staged from it must go, not be resumed.
    pub fn is_integrity(&self) -> bool {
        matches!(self, StoreError::Integrity(_) | StoreError::ShortRead(_))
    }

    /// The destination's filesystem is full (ENOSPC) or the user's quota spent (EDQUOT): what
    /// was staged must go, or it keeps the disk full.
    pub fn is_out_of_space(&self) -> bool {
        matches!(self, StoreError::Io { source, .. } if no_space(source))
    }

    /// What was staged must be removed rather than kept for a resume: bad content, or no room.
    pub fn discards_staged(&self) -> bool {
        self.is_integrity() || self.is_out_of_space()
    }

    /// The credential may not do this (refused outright, or by the service).
    pub fn is_denied(&self) -> bool {
        matches!(
            self,
            StoreError::Auth(_) | StoreError::Http { status: 403, .. }
        )
    }
}

/// A full filesystem (ENOSPC) or a spent quota (EDQUOT).
pub fn no_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
