//! The engine's errors as the verbs API reports them.

use crate::Error;

/// The engine refusing a verb, in the verbs API's words (what the soft provider reports).
impl From<Error> for verbs::Error {
    fn from(e: Error) -> verbs::Error {
        use Error as T;
        let kind = match &e {
            T::NoQp(_) | T::NoCq(_) | T::NoSrq(_) | T::NoPd(_) => verbs::ErrorKind::NotFound,
            T::Transition(_) | T::BadState { .. } => verbs::ErrorKind::InvalidState,
            T::OpNotSupported { .. } => verbs::ErrorKind::Unsupported,
            T::QueueFull(_) => verbs::ErrorKind::ResourceExhausted,
            T::PdInUse(_) => verbs::ErrorKind::Busy,
            T::Exhausted { .. } => verbs::ErrorKind::ResourceExhausted,
            T::TooLong { .. } | T::InvalidWr(_) | T::InvalidMr(_) | T::CapTooLarge { .. } => {
                verbs::ErrorKind::InvalidArgument
            }
        };
        verbs::Error::refused(kind, e.to_string())
    }
}
