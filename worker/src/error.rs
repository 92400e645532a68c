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
    #[error("transport: {0}")]
    Transport(String),

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

    /// A server-side copy that the service ended without success, or that did not end in time.
    #[error("server-side copy {0}")]
    Copy(String),

    /// The store cannot do this (a capability the trait leaves optional).
    #[error("not supported: {0}")]
    Unsupported(String),

    #[error("{0}")]
    Invalid(String),
}

impl StoreError {
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
            StoreError::Transport(msg) => Some(if msg.contains("timed out") {
                "timeout".into()
            } else if msg.contains("truncated") {
                "truncated".into()
            } else {
                "connection".into()
            }),
            // A size mismatch on a ranged read is a truncated body in disguise.
            StoreError::Integrity(msg) if msg.starts_with("short read") => Some("truncated".into()),
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
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
