//! Why a verb failed, in words every provider shares.

use std::fmt;

use crate::*;

/// Why a verb failed. [`Error::kind`] says it in words any caller can match, whichever
/// provider answered; the variants carry the details.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device name could not be understood.
    #[error("bad device name {name:?}: {why}")]
    BadDeviceName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The device could not be opened.
    #[error("cannot open {device}: {source}")]
    Open {
        /// The device.
        device: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The device refused the verb: a QP in the wrong state, a full queue, an unknown or
    /// busy object, a malformed work request or attribute.
    #[error("{reason}")]
    Refused {
        /// Why, as callers match it.
        kind: ErrorKind,
        /// What the device said.
        reason: String,
    },
    /// A memory access fell outside its region.
    #[error("{len} bytes at offset {offset} lie outside the {region_len}-byte region")]
    OutOfBounds {
        /// Offset in the region.
        offset: usize,
        /// Length of the access.
        len: usize,
        /// Length of the region.
        region_len: usize,
    },
    /// The object belongs to another context.
    #[error("the {0} belongs to another device context")]
    ForeignObject(&'static str),
    /// A GID index beyond the table.
    #[error("GID index {index} is not in the table of {device} ({len} entries)")]
    NoGid {
        /// The device.
        device: String,
        /// The index asked for.
        index: usize,
        /// The table's length.
        len: usize,
    },
    /// The provider does not support the operation.
    #[error("{device} does not support {what}")]
    Unsupported {
        /// The device.
        device: String,
        /// What it lacks.
        what: &'static str,
    },
    /// podnet was built without the rdma-core provider.
    #[error(
        "this podnet was built without the rdma-core provider (--no-default-features); rebuild \
         with the default features (needs cmake and libclang-dev) to use RDMA devices"
    )]
    NotBuilt,
    /// libibverbs could not be loaded.
    #[error(
        "libibverbs.so.1 (rdma-core) could not be loaded, so no RDMA device can be opened; \
         install libibverbs1 and the device's provider (ibverbs-providers)"
    )]
    NoLibibverbs,
    /// No RDMA device (of that name) was found.
    #[error("{}", no_device_message(wanted.as_deref(), found, why))]
    NoRdmaDevice {
        /// The device asked for (`None`: any).
        wanted: Option<String>,
        /// The devices libibverbs found.
        found: Vec<String>,
        /// What libibverbs said, if it failed.
        why: String,
    },
    /// A libibverbs call failed.
    #[error("{device}: {verb} failed: {source}")]
    Call {
        /// The device.
        device: String,
        /// The verb (`ibv_create_qp`, …).
        verb: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An I/O error of the provider.
    #[error("{device}: {source}")]
    Io {
        /// The device.
        device: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// What kind of failure an [`Error`] is: what a caller can act on, the same for every
/// provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A name, argument, attribute or work request is malformed or out of range (`EINVAL`).
    InvalidArgument,
    /// The object's state does not allow the verb: a QP not yet in RTS, a transition the
    /// state machine forbids.
    InvalidState,
    /// The object, device or table entry does not exist (`ENOENT`, `ENODEV`).
    NotFound,
    /// The object is still in use: a protection domain with regions or QPs (`EBUSY`).
    Busy,
    /// A queue is full or a resource exhausted (`ENOMEM`).
    ResourceExhausted,
    /// A memory access outside its region, or without the right to it.
    Protection,
    /// The device or provider cannot do it (`EOPNOTSUPP`).
    Unsupported,
    /// The provider is not here: not built in, or libibverbs missing.
    Unavailable,
    /// An operating-system or library call failed otherwise.
    Io,
}

impl Error {
    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::BadDeviceName { .. } | Error::ForeignObject(_) => ErrorKind::InvalidArgument,
            Error::Refused { kind, .. } => *kind,
            Error::OutOfBounds { .. } => ErrorKind::Protection,
            Error::NoGid { .. } | Error::NoRdmaDevice { .. } => ErrorKind::NotFound,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::NotBuilt | Error::NoLibibverbs => ErrorKind::Unavailable,
            Error::Open { source, .. } | Error::Call { source, .. } | Error::Io { source, .. } => {
                kind_of_errno(source.raw_os_error())
            }
        }
    }

    /// A verb the device refused.
    pub fn refused(kind: ErrorKind, reason: impl Into<String>) -> Error {
        Error::Refused { kind, reason: reason.into() }
    }

    /// The object a verb named does not exist (`what`: `QP 0x11`, `CQ 3`).
    pub fn no_such(what: impl fmt::Display) -> Error {
        Error::refused(ErrorKind::NotFound, format!("no {what}"))
    }

    /// A verb the QP's state does not allow.
    pub fn bad_state(qpn: Qpn, state: QpState, verb: &str) -> Error {
        Error::refused(
            ErrorKind::InvalidState,
            format!("QP {qpn} is {state:?}, which does not allow {verb}"),
        )
    }
}

pub(crate) fn kind_of_errno(errno: Option<i32>) -> ErrorKind {
    match errno {
        Some(libc::EINVAL) => ErrorKind::InvalidArgument,
        Some(libc::ENOENT | libc::ENODEV | libc::ENXIO) => ErrorKind::NotFound,
        Some(libc::EBUSY) => ErrorKind::Busy,
        Some(libc::ENOMEM | libc::ENOSPC | libc::EAGAIN) => ErrorKind::ResourceExhausted,
        Some(libc::EOPNOTSUPP | libc::ENOSYS) => ErrorKind::Unsupported,
        Some(libc::EPERM | libc::EACCES | libc::EFAULT) => ErrorKind::Protection,
        _ => ErrorKind::Io,
    }
}

pub(crate) fn no_device_message(wanted: Option<&str>, found: &[String], why: &str) -> String {
    let mut m = match wanted {
        Some(w) => format!("no RDMA device named {w:?}"),
        None => "no RDMA device found".to_string(),
    };
    if found.is_empty() {
        m.push_str(" (libibverbs lists none");
        if !why.is_empty() {
            m.push_str(": ");
            m.push_str(why);
        }
        m.push_str("; `podnet devices` shows what this host has)");
    } else {
        m.push_str(&format!(" (libibverbs lists {})", found.join(", ")));
    }
    m
}

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
